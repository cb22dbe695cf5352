-- 061: a pop that names no partition reads only the partitions that may have something for a group.
-- Before, its statements joined every partition of the queue to the group's rows (and its first
-- sight scanned them all for rows to create), so a pop cost about 3 µs a partition, idle or not:
-- 34 ms at 10,000 partitions (npm run bench:pop-partitions). A queue of many partitions (one per
-- customer, per chat) is mostly idle partitions.
--
-- queen.partitions.ready: false only when every group the queue knows (queen.consumer_groups,
-- below; at least one) has finished every message of the partition. The sweeper sets it false
-- (queen.log_settle_ready_v1); every push that stores a message sets it true, in the same write
-- that bumps last_seq, so a push's HOT update of its partition stays HOT (a value set to itself
-- changes no index). The partial index holds the ready partitions of each queue, which is what the
-- pop reads. A new column with a constant default is a change of the catalog alone: every existing
-- partition is ready, and the sweeper settles them.
--
-- queen.consumer_groups: the groups a queue's pops have seen. A group the queue does not know has
-- its first pop register it (queen.log_pop_of_v1), which makes every settled partition it has not
-- finished ready again, under the queue row's lock, so no settling runs meanwhile. Whatever moves a
-- group back (a requeued dead letter, a group's rows removed by a delete or by retention) forgets
-- the group, so its next pop registers it again. No rows are copied here: an existing group
-- registers at its next pop.
--
-- The lock: ACCESS EXCLUSIVE on queen.partitions for the ALTER, then SHARE for the index build,
-- held to this file's commit, taken the way 056 and 058 take theirs, now written once:
-- queen.migrate_under_brief_lock_v1 (below) runs DDL whose lock waits at most 200 ms
-- (lock_timeout), and a refused attempt again after a 100 ms pause that lets the queued statements
-- through, up to 50 times (about 15 s); then the boot fails, saying what could not be done, and
-- nothing has changed. Behind a catalog check, so a database that has both is never locked.
-- The helper is the migrations' own (a later migration may call it; sql/functions/ is applied after
-- the migrations, so a migration never calls what is defined there).
CREATE TABLE IF NOT EXISTS queen.consumer_groups (
  queue_id       UUID NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
  consumer_group TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (queue_id, consumer_group)
);
CREATE OR REPLACE FUNCTION queen.migrate_under_brief_lock_v1(p_statements TEXT[], p_what TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
  v_attempt INT := 0;
  v_lock_timeout TEXT := current_setting('lock_timeout');
  v_statement TEXT;
BEGIN
  LOOP
    BEGIN
      PERFORM set_config('lock_timeout', '200ms', true);
      FOREACH v_statement IN ARRAY p_statements LOOP
        EXECUTE v_statement;
      END LOOP;
      EXIT;
    EXCEPTION WHEN lock_not_available THEN
      v_attempt := v_attempt + 1;
      IF v_attempt >= 50 THEN
        RAISE EXCEPTION '% once, under a brief lock, and 50 attempts of 200 ms each found the table held; boot again when the transactions holding it have ended', p_what;
      END IF;
    END;
    PERFORM pg_sleep(0.1);
  END LOOP;
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
END $$;
SELECT queen.migrate_under_brief_lock_v1(ARRAY[
    'ALTER TABLE queen.partitions ADD COLUMN IF NOT EXISTS ready BOOLEAN NOT NULL DEFAULT true',
    'CREATE INDEX idx_partitions_ready ON queen.partitions (queue_id) WHERE ready'],
  'queen.partitions gains its ready column and index')
 WHERE to_regclass('queen.idx_partitions_ready') IS NULL;
