// The statements the API sends for timers. Named, so each is parsed and planned once per connection;
// never built per request. Every rule is inside queen.timers_apply_v1 and its neighbours (sql/031).

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
 * The transaction wire's `timers` array ($2 is the whole body's text), answers re-indexed into the
 * wire's flat results array ($3 = how many answers precede them), with the counts the route bills.
 */
export const TX_TIMERS = {
  name: 'tx_timers_v1',
  text: `SELECT coalesce(jsonb_agg(jsonb_set(e, '{index}', to_jsonb(k - 1 + $3::int)) ORDER BY k), '[]'::jsonb)::text AS results,
                count(*) FILTER (WHERE (e ->> 'created')::boolean OR (e ->> 'rescheduled')::boolean)::int AS promised,
                count(*) FILTER (WHERE (e ->> 'cancelled')::boolean)::int AS cancelled
           FROM jsonb_array_elements(queen.timers_apply_v1($1::uuid, $2::jsonb -> 'timers')) WITH ORDINALITY AS t(e, k)`,
};
