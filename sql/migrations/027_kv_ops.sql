-- 027: the KV operations' signatures that took the operation as a jsonb object go.

-- Replaced by the per-operation functions of sql/functions/kv_ops.sql (same rules, fields as arguments).
DROP FUNCTION IF EXISTS queen.kv_put_v1(UUID, JSONB, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS queen.kv_delete_v1(UUID, JSONB, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS queen.kv_incr_v1(UUID, JSONB, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS queen.kv_get_v1(UUID, JSONB, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS queen.kv_get_many_v1(UUID, JSONB, TIMESTAMPTZ);
