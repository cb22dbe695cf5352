// The statements the API sends for timers. Named, so each is parsed and planned once per connection;
// never built per request. Every rule is inside queen.timers_apply_v1 and its neighbours (sql/functions/timers.sql).

/** The wire's `timers` array and any batch of timer operations: answers aligned to the request. */
export const TIMERS_APPLY = {
  name: 'timers_apply_v1',
  text: `SELECT queen.timers_apply_v1($1::uuid, $2::jsonb)::text AS results`,
};

/**
 * One operation from a route: the body's text goes in as is (a payload's numbers are never
 * narrowed) with the route's own fields laid over it ($3, a JSON object); the answer comes back
 * without the batch bookkeeping (index, op), plus the outcome flags the route counts.
 */
export const TIMERS_APPLY_ONE = {
  name: 'timers_apply_one_v1',
  text: `SELECT (r - 'index' - 'op')::text AS body,
                coalesce((r ->> 'created')::boolean, false) AS created,
                coalesce((r ->> 'cancelled')::boolean, false) AS cancelled,
                coalesce((r ->> 'rescheduled')::boolean, false) AS rescheduled
         FROM (SELECT queen.timers_apply_v1($1::uuid, jsonb_build_array($2::jsonb || $3::jsonb)) -> 0 AS r) s`,
};

export const TIMERS_PEEK = {
  name: 'timers_peek_v1',
  text: `SELECT queen.timers_peek_v1($1::uuid, $2::uuid)::text AS body`,
};

export const TIMERS_LIST = {
  name: 'timers_list_v1',
  text: `SELECT queen.timers_list_v1($1::uuid, $2::text, $3::text, $4::int)::text AS body`,
};

/**
 * The transaction wire's `timers` array, as its lock space's expression for shared/lockOrder.ts
 * (between kv and partitions), over the wire's named arguments (shared/sql/log.ts TX_ARGS): each
 * answer's `index` is rewritten to its place in the flat results array.
 */
export const TX_TIMERS_EXPR = `SELECT coalesce(jsonb_agg(jsonb_set(e, '{index}', to_jsonb(k - 1 + a.timers_offset)) ORDER BY k), '[]'::jsonb)
         FROM jsonb_array_elements(queen.timers_apply_v1(a.tenant, a.body -> 'timers')) WITH ORDINALITY AS t(e, k)`;
