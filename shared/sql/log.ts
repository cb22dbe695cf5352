// The statements the API sends for the message log and the transaction wire. Named, so each is
// parsed and planned once per connection; never built per request. Every rule is in
// sql/functions/log_push.sql, log_consume.sql and log_apply.sql: request text goes in as is, jsonb text comes back and is written out as is.
// $1 of each is the tenant (services/api/edge/tenant.ts tenantOf): every log procedure takes it.

/** POST /api/v1/configure: the body as is; $3 whether this API holds an encryption key. */
export const LOG_CONFIGURE = {
  name: 'log_configure_v2',
  text: `SELECT queen.log_configure_v2($1::uuid, $2::jsonb, $3::boolean)::text AS body`,
};

/**
 * POST /api/v1/push: the body's items, pushed in request order. The items are read once (OFFSET 0
 * keeps the subquery): the entry function is inlined and names them several times.
 */
export const LOG_PUSH = {
  name: 'log_push_request_v2',
  text: `SELECT queen.log_push_request_v2($1::uuid, s.items)::text AS results FROM (SELECT $2::jsonb -> 'items' AS items OFFSET 0) s`,
};

/**
 * POST /api/v1/push with trace context (docs/tracing.md): an item's traceId, or the request's
 * sampled span ($4, {"traceId","spanId"} as JSON, or NULL). $3: the sealed payloads, as
 * LOG_PUSH_SEALED's, or NULL. A push without trace context sends LOG_PUSH (or LOG_PUSH_SEALED):
 * with tracing off nothing here runs.
 */
export const LOG_PUSH_TRACED = {
  name: 'log_push_traced_v1',
  text: `SELECT queen.log_push_traced_v1($1::uuid, s.items, $4::jsonb, $3::jsonb)::text AS results FROM (SELECT $2::jsonb -> 'items' AS items OFFSET 0) s`,
};

/**
 * Concurrent one-item pushes of one tenant to one partition, gathered by services/api/push/coalescer.ts: $2 is a
 * JSON array of the request bodies, as the clients wrote them. One row per body, in order: its
 * results array, or NULL where the fast path declined.
 */
export const LOG_PUSH_COALESCED = {
  name: 'log_push_coalesced_v2',
  text: `SELECT queen.log_push_coalesced_v2($1::uuid, $2::jsonb) AS results`,
};

/** LOG_PUSH_COALESCED for a gathering of which a request has trace context: $3 each body's span (or null), aligned. */
export const LOG_PUSH_COALESCED_TRACED = {
  name: 'log_push_coalesced_traced_v1',
  text: `SELECT queen.log_push_coalesced_traced_v1($1::uuid, $2::jsonb, $3::jsonb) AS results`,
};

/**
 * GET /api/v1/pop: $2 queue, $3 partition (NULL: any), $4 consumer group, $5 batch, $6 partitions
 * (Queen's: how many partitions one pop may lease). The messages are the JSON text PostgreSQL wrote
 * (sent as it is), beside what Queen's answer names at its top level: the (first) partition and the
 * lease they came from, and how many partitions.
 */
export const LOG_POP = {
  name: 'log_pop_v5',
  // One partition (the common pop) goes straight to queen.log_pop_v3: a plpgsql call less per pop.
  text: `SELECT (r).messages, (r).partition, (r).partition_id::text AS partition_id, (r).lease_id::text AS lease_id, (r).queue,
                cardinality((r).partition_ids) AS partitions
           FROM (SELECT CASE WHEN $6::int = 1 THEN queen.log_pop_v3($1::uuid, $2::text, $3::text, $4::text, $5::int)
                             ELSE queen.log_pop_many_v3($1::uuid, $2::text, $3::text, $4::text, $5::int, $6::int) END AS r OFFSET 0) s`,
};

/** LOG_POP with Queen's server-side autoAck: the messages acked `completed` in the same statement. */
export const LOG_POP_AUTO_ACK = {
  name: 'log_pop_auto_ack_v1',
  text: `SELECT r::text AS messages, r -> 0 ->> 'partition' AS partition, r -> 0 ->> 'partitionId' AS partition_id,
                r -> 0 ->> 'leaseId' AS lease_id, r -> 0 ->> 'queue' AS queue,
                (SELECT count(DISTINCT e ->> 'partitionId') FROM jsonb_array_elements(r) e)::int AS partitions
           FROM (SELECT queen.log_auto_ack_v1($1::uuid, queen.log_pop_many_v2($1::uuid, $2::text, $3::text, $4::text, $5::int, $6::int)) AS r OFFSET 0) s`,
};

/**
 * GET /api/v1/pop?namespace=&task=: $2 namespace, $3 task (NULL: any), $4 group, $5 batch, $6
 * partitions, $7 autoAck. The answer's columns are LOG_POP's.
 */
export const LOG_POP_MATCH = {
  name: 'log_pop_match_v1',
  text: `SELECT r::text AS messages, r -> 0 ->> 'partition' AS partition, r -> 0 ->> 'partitionId' AS partition_id,
                r -> 0 ->> 'leaseId' AS lease_id, r -> 0 ->> 'queue' AS queue,
                (SELECT count(DISTINCT e ->> 'partitionId') FROM jsonb_array_elements(r) e)::int AS partitions
           FROM (SELECT CASE WHEN $7::boolean THEN queen.log_auto_ack_v1($1::uuid, m) ELSE m END AS r
                   FROM (SELECT queen.log_pop_match_v1($1::uuid, $2::text, $3::text, $4::text, $5::int, $6::int) AS m OFFSET 0) p OFFSET 0) s`,
};

/** Before a pop with subscriptionFrom=<timestamp>: $2 queue, $3 partition (NULL: all), $4 the group, $5 the instant. */
export const LOG_SUBSCRIBE_FROM = {
  name: 'log_subscribe_from_v1',
  text: `SELECT queen.log_subscribe_from_v1($1::uuid, $2::text, $3::text, $4::text, $5::timestamptz)`,
};

/** DELETE /api/v1/consumer-groups/:group: $2 the group, $3 deleteMetadata. */
export const LOG_DELETE_CONSUMER_GROUP = {
  name: 'log_delete_consumer_group_v1',
  text: `SELECT queen.log_delete_consumer_group_v1($1::uuid, $2::text, $3::boolean)::text AS body`,
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

/** GET /api/v1/dlq: $2 queue, $3 partition, $4 consumer group (each NULL: all), $5 limit, $6 offset, $7 from, $8 to (NULL: unbounded). */
export const LOG_DEAD_LETTERS = {
  name: 'log_dead_letters_v2',
  text: `SELECT queen.log_dead_letters_v2($1::uuid, $2::text, $3::text, $4::text, $5::int, $6::int, $7::timestamptz, $8::timestamptz)::text AS body`,
};

/** POST /api/v1/ack: the body is one ack. */
export const LOG_ACK_ONE = {
  name: 'log_ack_one_v2',
  text: `SELECT (queen.log_ack_batch_v2($1::uuid, jsonb_build_array($2::jsonb), false) -> 0)::text AS body`,
};

/** POST /api/v1/ack/batch: each ack succeeds or fails on its own; a body-level consumerGroup is every ack's. */
export const LOG_ACK_BATCH = {
  name: 'log_ack_batch_v2',
  text: `SELECT r::text AS results, NOT (r @> '[{"ok": false}]') AS ok
           FROM (SELECT queen.log_ack_batch_body_v2($1::uuid, $2::jsonb) AS r) s`,
};

/** POST /api/v1/lease/:leaseId/extend: $2 the lease id, $3 seconds (NULL: the queue's lease time). */
export const LOG_EXTEND_LEASE = {
  name: 'log_extend_lease_v2',
  text: `SELECT queen.log_extend_lease_v2($1::uuid, $2::text, $3::int)::text AS body`,
};

/**
 * The transaction wire's arguments, named once for every lock space's expression: the tenant, the
 * body (parsed to jsonb once), where each array's answers start in the flat results array, and the
 * sealed payloads of the push items and of the timers' schedules (NULL but for a bundle writing to
 * an encrypted queue).
 */
export const TX_ARGS = `$1::uuid AS tenant, $2::jsonb AS body, $3::int AS kv_offset, $4::int AS timers_offset, $5::jsonb AS sealed, $6::jsonb AS timers_sealed`;

/** TX_ARGS and the bundle's trace context ($7: the request's sampled span, or NULL when only an item's traceId is there). */
export const TX_ARGS_TRACED = `${TX_ARGS}, $7::jsonb AS trace`;

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
  partitions: `queen.log_apply_v2(a.tenant, a.body -> 'operations', a.sealed)`,
  /** `partitions` with trace context (over TX_ARGS_TRACED): the pushes' messages stamped. */
  partitionsTraced: `queen.log_apply_traced_v1(a.tenant, a.body -> 'operations', a.sealed, a.trace)`,
} as const;

/** POST /api/v1/traces: the body as is. */
export const LOG_RECORD_TRACE = {
  name: 'log_record_trace_v1',
  text: `SELECT queen.log_record_trace_v1($1::uuid, $2::jsonb)::text AS body`,
};

/** GET /api/v1/traces/:partitionId/:transactionId: $2 partition id, $3 transactionId. */
export const LOG_MESSAGE_TRACES = {
  name: 'log_message_traces_v1',
  text: `SELECT queen.log_message_traces_v1($1::uuid, $2::text, $3::text)::text AS body`,
};

/** After a QK428 (a push to an encrypted queue): $1 the body, $2 the encrypted queues: each item's payload text to seal, NULL for the others. */
export const LOG_SEAL_TEXTS = {
  name: 'log_seal_texts_v1',
  text: `SELECT queen.log_seal_texts_v1($1::jsonb -> 'items', $2::text[]) AS texts`,
};

/** POST /api/v1/push with the sealed payloads: $3 a JSON array aligned with the items (a sealed text, or null). */
export const LOG_PUSH_SEALED = {
  name: 'log_push_sealed_v1',
  text: `SELECT queen.log_push_request_v2($1::uuid, s.items, $3::jsonb)::text AS results FROM (SELECT $2::jsonb -> 'items' AS items OFFSET 0) s`,
};

/** The transaction wire's push items to seal after a QK428: $1 the body, $2 the encrypted queues. */
export const TX_SEAL_TEXTS = {
  name: 'tx_seal_texts_v1',
  text: `SELECT queen.log_seal_texts_v1(queen.log_op_items_v1($1::jsonb -> 'operations'), $2::text[]) AS texts`,
};
