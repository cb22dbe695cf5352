-- queen:no-transaction
-- 049: the partitions of one sweeper shard, found through an index rather than a scan of every
-- partition per shard (the retention pass, sql/functions/retention.sql, visits the partitions of the
-- shards it claimed). The expression is the one queen.log_shard_v1 computes; built CONCURRENTLY so a
-- running cell's pushes (which insert partitions) never wait for it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_partitions_shard ON queen.partitions ((hashtext(id::text) & 63));
