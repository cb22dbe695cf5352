// The statements the API sends for timers. Named, so each is parsed and planned once per connection;
// never built per request. Every rule is inside queen.timers_apply_v2 and its neighbours (sql/functions/timers.sql).

/** Any batch of timer operations: answers aligned to the request. */
export const TIMERS_APPLY = {
  name: 'timers_apply_v2',
  text: `SELECT queen.timers_apply_v2($1::uuid, $2::jsonb)::text AS results`,
};

// The one-operation batch both route statements apply, and the shape of its answer: the traced one
// only wraps the batch, so the two cannot drift apart.
const APPLY_ONE = `queen.timers_apply_v2($1::uuid, jsonb_build_array($2::jsonb || $3::jsonb), $4::jsonb)`;
const applyOneText = (results: string) => `SELECT (r - 'index' - 'op')::text AS body,
                coalesce((r ->> 'created')::boolean, false) AS created,
                coalesce((r ->> 'cancelled')::boolean, false) AS cancelled,
                coalesce((r ->> 'rescheduled')::boolean, false) AS rescheduled
         FROM (SELECT ${results} -> 0 AS r) s`;

/**
 * One operation from a route: the body's text goes in as is (a payload's numbers are never
 * narrowed) with the route's own fields laid over it ($3, a JSON object); the answer comes back
 * without the batch bookkeeping (index, op), plus the outcome flags the route counts. $4: NULL, or
 * after a QK428 (a schedule into an encrypted queue) the one-element array of its sealed payload.
 */
export const TIMERS_APPLY_ONE = {
  name: 'timers_apply_one_v2',
  text: applyOneText(APPLY_ONE),
};

/** TIMERS_APPLY_ONE from a traced request: $5 its sampled span ({"traceId","spanId"}), stored on the timer it creates. */
export const TIMERS_APPLY_ONE_TRACED = {
  name: 'timers_apply_one_traced_v1',
  text: applyOneText(`queen.timers_stamp_traces_v1(${APPLY_ONE}, $5::jsonb)`),
};

/** After a QK428 on one operation from a route: $1 the body, $2 the route's fields, $3 the encrypted queues: the payload text to seal, or NULL. */
export const TIMERS_SEAL_ONE = {
  name: 'timers_seal_one_v1',
  text: `SELECT queen.timers_seal_texts_v1(jsonb_build_array($1::jsonb || $2::jsonb), $3::text[]) AS texts`,
};

export const TIMERS_PEEK = {
  name: 'timers_peek_v2',
  text: `SELECT queen.timers_peek_v2($1::uuid, $2::uuid)::text AS body`,
};

export const TIMERS_LIST = {
  name: 'timers_list_v2',
  text: `SELECT queen.timers_list_v2($1::uuid, $2::text, $3::text, $4::int)::text AS body`,
};

/**
 * The transaction wire's `timers` array, as its lock space's expression for shared/lockOrder.ts
 * (between kv and partitions), over the wire's named arguments (shared/sql/log.ts TX_ARGS): each
 * answer's `index` is rewritten to its place in the flat results array. `a.timers_sealed` is NULL
 * but for a bundle scheduling into an encrypted queue: the sealed payloads, aligned with the array.
 */
export const TX_TIMERS_EXPR = `SELECT coalesce(jsonb_agg(jsonb_set(e, '{index}', to_jsonb(k - 1 + a.timers_offset)) ORDER BY k), '[]'::jsonb)
         FROM jsonb_array_elements(queen.timers_apply_v2(a.tenant, a.body -> 'timers', a.timers_sealed)) WITH ORDINALITY AS t(e, k)`;

/** TX_TIMERS_EXPR with trace context (over TX_ARGS_TRACED): each timer it creates stores the bundle's span. */
export const TX_TIMERS_EXPR_TRACED = `SELECT coalesce(jsonb_agg(jsonb_set(e, '{index}', to_jsonb(k - 1 + a.timers_offset)) ORDER BY k), '[]'::jsonb)
         FROM jsonb_array_elements(queen.timers_stamp_traces_v1(queen.timers_apply_v2(a.tenant, a.body -> 'timers', a.timers_sealed), a.trace)) WITH ORDINALITY AS t(e, k)`;

/** The transaction wire's schedules to seal after a QK428: $1 the body, $2 the encrypted queues. */
export const TX_TIMERS_SEAL_TEXTS = {
  name: 'tx_timers_seal_texts_v1',
  text: `SELECT queen.timers_seal_texts_v1($1::jsonb -> 'timers', $2::text[]) AS texts`,
};
