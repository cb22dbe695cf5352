-- 011: the log's functions from before tenancy go (the push rules are sql/functions/log_push.sql).

-- The signatures from before tenancy, whose bodies found a queue by name alone. The entry points
-- that API called stayed one release longer, as wrappers for the default tenant (043 drops them).
DROP FUNCTION IF EXISTS queen.log_ensure_partition_v1(TEXT, TEXT);
DROP FUNCTION IF EXISTS queen.log_push_v1(TEXT, TEXT, JSONB, TEXT);
DROP FUNCTION IF EXISTS queen.log_push_items_v1(JSONB, INT);
DROP FUNCTION IF EXISTS queen.log_lock_partitions_v1(JSONB);
DROP FUNCTION IF EXISTS queen.log_lock_consumers_v1(JSONB[]);
DROP FUNCTION IF EXISTS queen.log_ack_one_v1(JSONB, INT, BOOLEAN);
DROP FUNCTION IF EXISTS queen.log_push_fast_many_v1(TEXT, TEXT, JSONB[], TEXT[]);
DROP FUNCTION IF EXISTS queen.log_push_fast_v1(TEXT, TEXT, JSONB, TEXT);
DROP FUNCTION IF EXISTS queen.log_push_one_fast_v1(JSONB);
