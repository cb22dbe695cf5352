// The statements the API sends for the message log and the transaction wire. Named, so each is
// parsed and planned once per connection; never built per request. Every rule is in
// sql/functions/log_push.sql, log_consume.sql and log_apply.sql: request text goes in as is, jsonb text comes back and is written out as is.
// $1 of each is the tenant (services/api/edge/tenant.ts tenantOf): every log procedure takes it.

/** POST /api/v1/configure: the body as is. */
export const LOG_CONFIGURE = {
  name: 'log_configure_v2',
  text: `SELECT queen.log_configure_v2($1::uuid, $2::jsonb)::text AS body`,
};

/**
 * POST /api/v1/push: the body's items, pushed in request order. The items are read once (OFFSET 0
 * keeps the subquery): the entry function is inlined and names them several times.
 */
export const LOG_PUSH = {
  name: 'log_push_request_v1',
  text: `SELECT queen.log_push_request_v1($1::uuid, s.items)::text AS results FROM (SELECT $2::jsonb -> 'items' AS items OFFSET 0) s`,
};

/**
 * Concurrent one-item pushes of one tenant to one partition, gathered by services/api/push/coalescer.ts: $2 is a
 * JSON array of the request bodies, as the clients wrote them. One row per body, in order: its
 * results array, or NULL where the fast path declined.
 */
export const LOG_PUSH_COALESCED = {
  name: 'log_push_coalesced_v1',
  text: `SELECT queen.log_push_coalesced_v1($1::uuid, $2::jsonb) AS results`,
};

/**
 * GET /api/v1/pop: $2 queue, $3 partition (NULL: any), $4 consumer group, $5 batch, $6 partitions
 * (Queen's: how many partitions one pop may lease). Beside the messages, what Queen's answer names at
 * its top level: the (first) partition and the lease they came from, and how many partitions.
 */
export const LOG_POP = {
  name: 'log_pop_v3',
  // One partition (the common pop) goes straight to queen.log_pop_v1: a plpgsql call less per pop.
  text: `SELECT r::text AS messages, r -> 0 ->> 'partition' AS partition, r -> 0 ->> 'partitionId' AS partition_id,
                r -> 0 ->> 'leaseId' AS lease_id,
                CASE WHEN $6::int = 1 THEN 1 ELSE (SELECT count(DISTINCT e ->> 'partitionId') FROM jsonb_array_elements(r) e)::int END AS partitions
           FROM (SELECT CASE WHEN $6::int = 1 THEN queen.log_pop_v1($1::uuid, $2::text, $3::text, $4::text, $5::int)
                             ELSE queen.log_pop_many_v1($1::uuid, $2::text, $3::text, $4::text, $5::int, $6::int) END AS r OFFSET 0) s`,
};

/** Before a pop with subscriptionMode=new: $2 queue, $3 partition (NULL: all), $4 the group. */
export const LOG_SUBSCRIBE_NEW = {
  name: 'log_subscribe_new_v1',
  text: `SELECT queen.log_subscribe_new_v1($1::uuid, $2::text, $3::text, $4::text)`,
};

/** DELETE /api/v1/resources/queues/:queue: $2 the queue. */
export const LOG_DELETE_QUEUE = {
  name: 'log_delete_queue_v1',
  text: `SELECT queen.log_delete_queue_v1($1::uuid, $2::text)::text AS body`,
};

/** GET /api/v1/dlq: $2 queue, $3 partition, $4 consumer group (each NULL: all), $5 limit, $6 offset. */
export const LOG_DEAD_LETTERS = {
  name: 'log_dead_letters_v1',
  text: `SELECT queen.log_dead_letters_v1($1::uuid, $2::text, $3::text, $4::text, $5::int, $6::int)::text AS body`,
};

/** POST /api/v1/ack: the body is one ack. */
export const LOG_ACK_ONE = {
  name: 'log_ack_one_v1',
  text: `SELECT (queen.log_ack_batch_v1($1::uuid, jsonb_build_array($2::jsonb), false) -> 0)::text AS body`,
};

/** POST /api/v1/ack/batch: each ack succeeds or fails on its own; a body-level consumerGroup is every ack's. */
export const LOG_ACK_BATCH = {
  name: 'log_ack_batch_v1',
  text: `SELECT r::text AS results, NOT (r @> '[{"ok": false}]') AS ok
           FROM (SELECT queen.log_ack_batch_body_v1($1::uuid, $2::jsonb) AS r) s`,
};

/** POST /api/v1/lease/:leaseId/extend: $2 the lease id, $3 seconds (NULL: the queue's lease time). */
export const LOG_EXTEND_LEASE = {
  name: 'log_extend_lease_v1',
  text: `SELECT queen.log_extend_lease_v1($1::uuid, $2::text, $3::int)::text AS body`,
};

/**
 * The transaction wire's arguments, named once for every lock space's expression: the tenant, the
 * body (parsed to jsonb once), and where each array's answers start in the flat results array.
 */
export const TX_ARGS = `$1::uuid AS tenant, $2::jsonb AS body, $3::int AS kv_offset, $4::int AS timers_offset`;

/** The wire's per-space expressions, composed in lock order by shared/lockOrder.ts. */
export const TX_EXPR = {
  /**
   * The `kv` array, inside the bundle (in_transaction = true: getPrefix refused). Each answer's
   * `index` is rewritten to its place in the flat results array, and so is a lost `required`'s
   * `failedIndex`: that verdict is an object, not an array, and ends the bundle (lockOrder.ts).
   */
  kv: `SELECT CASE WHEN jsonb_typeof(v) = 'object' THEN jsonb_set(v, '{failedIndex}', to_jsonb((v ->> 'failedIndex')::int + a.kv_offset))
              ELSE (SELECT coalesce(jsonb_agg(jsonb_set(e, '{index}', to_jsonb(k - 1 + a.kv_offset)) ORDER BY k), '[]'::jsonb)
                      FROM jsonb_array_elements(v) WITH ORDINALITY AS t(e, k)) END
         FROM (SELECT queen.kv_apply_v1(a.tenant, a.body -> 'kv', true) AS v OFFSET 0) called`,
  /** The `operations` (push, ack): the partitions/messages space. */
  partitions: `queen.log_apply_v1(a.tenant, a.body -> 'operations')`,
} as const;
