// The statements the API sends for the KV surface. Named, so each is parsed and planned once per
// connection; never built per request. Every rule is inside queen.kv_apply_v1.

/**
 * POST /api/v1/kv: the body's text goes in as is; the jsonb text PostgreSQL produced comes back: the
 * answers array, or the object of a lost `required`.
 */
export const KV_APPLY_BATCH = {
  name: 'kv_apply_batch_v1',
  text: `SELECT queen.kv_apply_v1($1::uuid, $2::jsonb -> 'operations', false)::text AS results`,
};

/**
 * The path routes: the operation the path names (op, ns, key) and the body's other fields, as
 * values; queen.kv_apply_one_v1 answers it as the one-operation batch would. A lost `required`'s
 * verdict carries "ok": false, which wins over the "ok": true in front of it (`ok` says which).
 */
export const KV_APPLY_ONE = {
  name: 'kv_apply_one_v3',
  text: `SELECT r::text AS body, r ->> 'version' AS version, (r -> 'ok')::boolean AS ok FROM (
           SELECT '{"ok": true}'::jsonb || queen.kv_apply_one_v1($1::uuid, $2::text, $3::text, $4::text, $5::jsonb) AS r
         ) s`,
};
