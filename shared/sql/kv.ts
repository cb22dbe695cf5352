// The statements the API sends for the KV surface. Named, so each is parsed and planned once per
// connection; never built per request. Every rule is inside queen.kv_apply_v1.

/** POST /api/v1/kv: the body's text goes in as is; the jsonb text PostgreSQL produced comes back. */
export const KV_APPLY_BATCH = {
  name: 'kv_apply_batch_v1',
  text: `SELECT queen.kv_apply_v1($1::uuid, $2::jsonb -> 'operations', false)::text AS results`,
};

/** The path routes: one operation built from the path, merged with the body's fields. */
export const KV_APPLY_ONE = {
  name: 'kv_apply_one_v1',
  text: `SELECT r::text AS body, r ->> 'version' AS version FROM (
           SELECT jsonb_build_object('ok', true) || (queen.kv_apply_v1($1::uuid, jsonb_build_array(
             jsonb_build_object('op', $2::text, 'ns', $3::text, 'key', $4::text) || $5::jsonb), false) -> 0) AS r
         ) s`,
};
