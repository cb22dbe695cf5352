-- 047: what no release since 0.1 calls goes (the contract step of expand/contract).

-- The log's entry points without a tenant: wrappers for the default tenant, kept for an API from
-- before tenancy running beside its successor.
DROP FUNCTION IF EXISTS queen.log_configure_v1(JSONB);
DROP FUNCTION IF EXISTS queen.log_push_request_v1(JSONB);
DROP FUNCTION IF EXISTS queen.log_push_coalesced_v1(JSONB);
DROP FUNCTION IF EXISTS queen.log_pop_v1(TEXT, TEXT, TEXT, INT);
DROP FUNCTION IF EXISTS queen.log_ack_batch_v1(JSONB, BOOLEAN);
DROP FUNCTION IF EXISTS queen.log_apply_v1(JSONB);
DROP FUNCTION IF EXISTS queen.log_extend_lease_v1(TEXT, INT);

-- The usage rollup that counted the whole cell in one statement; its sweepers moved to
-- queen.kv_usage_rollup_v2 (sql/functions/kv_usage.sql) in 0.1.
DROP FUNCTION IF EXISTS queen.kv_usage_rollup_v1();
