-- 058: a pop's and an ack's write of the group's row (queen.partition_consumers) become HOT updates.
-- The unique index on lease_id (010) made every pop (a new lease_id) and every ack that ended a
-- lease (lease_id to NULL) a non-HOT update: a new row version on a fresh slot, an entry in the
-- primary key and one in the lease index, each with its full-page image after a checkpoint. With
-- it, pop + ack of ten wrote 6.7x the WAL of a bare cursor advance (npm run bench:log, pop+ack10,
-- bench/README.md); without it, both writes stay on the row's page and touch no index.
-- The index found a lease by its id for POST /api/v1/lease/:leaseId/extend alone. A pop's lease
-- id now says where its row is (queen.log_lease_id_v1: the first six bytes of the partition's id,
-- UUID version 8), and queen.log_extend_lease_v2 reads it through the primary key. A lease id
-- without that shape (a 0.1 pop's during a rolling upgrade, or one made up) is found by a scan of
-- the group rows, as 0.1's queen.log_extend_lease_v1, which that release's API still calls, now does.
-- The index's name stays, on an index that holds nothing and no column an update changes
-- ((partition_id) WHERE false): 010 creates the lease index whenever no index has that name, and a
-- schema apply run again beside live traffic (test/log/log.test.ts) must not bring it back, nor
-- lock the table to do so.
-- fillfactor 70, as queen.kv's (024): a HOT update needs room on the row's page, and a table filled
-- by first pops packs its pages full, so each group row's next write moved it to another page and
-- touched the primary key anyway. New pages only; an existing table's fill on its next rewrite.
--
-- The lock: ACCESS EXCLUSIVE on queen.partition_consumers for the DROP, the CREATE and the
-- fillfactor, held to this file's commit (milliseconds). As 056 does, each attempt waits at most 200 ms (lock_timeout) and a refused one
-- is retried after a 100 ms pause that lets the queued pops and acks through, up to 50 times
-- (about 15 s); then the boot fails, saying so, and nothing has changed. Behind a catalog check,
-- so a database that has both is never locked.
DO $$
DECLARE
  v_attempt INT := 0;
  v_lock_timeout TEXT := current_setting('lock_timeout');
BEGIN
  IF pg_get_indexdef(to_regclass('queen.idx_partition_consumers_lease')) NOT LIKE '%(lease_id)%'
     AND (SELECT reloptions FROM pg_class WHERE oid = 'queen.partition_consumers'::regclass) @> ARRAY['fillfactor=70'] THEN
    RETURN;
  END IF;
  LOOP
    BEGIN
      PERFORM set_config('lock_timeout', '200ms', true);
      DROP INDEX IF EXISTS queen.idx_partition_consumers_lease;
      CREATE INDEX idx_partition_consumers_lease ON queen.partition_consumers (partition_id) WHERE false;
      ALTER TABLE queen.partition_consumers SET (fillfactor = 70);
      EXIT;
    EXCEPTION WHEN lock_not_available THEN
      v_attempt := v_attempt + 1;
      IF v_attempt >= 50 THEN
        RAISE EXCEPTION 'queen.idx_partition_consumers_lease is replaced once, with queen.partition_consumers set to fillfactor 70, under a brief ACCESS EXCLUSIVE lock on it, and 50 attempts of 200 ms each found it held; boot again when the transactions holding it have ended';
      END IF;
    END;
    PERFORM pg_sleep(0.1);
  END LOOP;
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
END $$;
