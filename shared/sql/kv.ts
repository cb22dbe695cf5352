// The statements the API sends for the KV surface. Named, so each is parsed and planned once per
// connection; never built per request. Every rule is inside queen.kv_apply_v1.

/** POST /api/v1/kv: the body's text goes in as is; the jsonb text PostgreSQL produced comes back. */
export const KV_APPLY_BATCH = {
  name: 'kv_apply_batch_v1',
  text: `SELECT queen.kv_apply_v1($1::uuid, $2::jsonb -> 'operations', false)::text AS results`,
};

/**
 * The path routes: the operation the path names (op, ns, key) and the body's other fields, as
 * values; queen.kv_apply_one_v1 answers it as the one-operation batch would.
 */
export const KV_APPLY_ONE = {
  name: 'kv_apply_one_v2',
  text: `SELECT r::text AS body, r ->> 'version' AS version FROM (
           SELECT '{"ok": true}'::jsonb || queen.kv_apply_one_v1($1::uuid, $2::text, $3::text, $4::text, $5::jsonb) AS r
         ) s`,
};
