-- 051: Queen's queue options the cell now honours beyond the lease, the retry limit and the two
-- delays (docs/log-and-transactions.md says what each does), and the per (partition, group) time
-- before which a failed message is not delivered again. Tables of their own beside queues and
-- partition_consumers, so no boot alters an existing table; new tables take no lock on any other.

-- Per queue, a row only once a configure named one of these options.
--  retry_delay_ms      after a `failed` ack, the group's partition is not leased again for this long
--  retry_delay_max_ms  0: the delay is retry_delay_ms every time; above it: the delay doubles with
--                      each failure of the message, capped here (the cell's own option)
--  max_size            0: no cap; else a push that would leave more unconsumed messages is refused
--  priority            the order of a pop by namespace/task across queues (higher first)
--  namespace, task     what a pop by namespace/task matches ('' = none)
--  encryption_enabled  payloads are stored encrypted (queen.sealed_messages marks which are)
CREATE TABLE IF NOT EXISTS queen.queue_options (
  queue_id           UUID PRIMARY KEY REFERENCES queen.queues (id) ON DELETE CASCADE,
  retry_delay_ms     INTEGER NOT NULL DEFAULT 0 CHECK (retry_delay_ms BETWEEN 0 AND 86400000),
  retry_delay_max_ms INTEGER NOT NULL DEFAULT 0 CHECK (retry_delay_max_ms BETWEEN 0 AND 86400000),
  max_size           INTEGER NOT NULL DEFAULT 0 CHECK (max_size >= 0),
  priority           INTEGER NOT NULL DEFAULT 0,
  namespace          TEXT COLLATE "C" NOT NULL DEFAULT '',
  task               TEXT COLLATE "C" NOT NULL DEFAULT '',
  encryption_enabled BOOLEAN NOT NULL DEFAULT false
);
DO $$
BEGIN
  IF to_regclass('queen.idx_queue_options_namespace') IS NULL THEN
    CREATE INDEX idx_queue_options_namespace ON queen.queue_options (namespace, task) WHERE namespace <> '' OR task <> '';
  END IF;
END $$;

-- Per (partition, group): no lease of the partition to the group before retry_at (a `failed` ack
-- under a queue with a retry delay). One row per partition_consumers row at most, overwritten by
-- the next failure; gone with the row.
CREATE TABLE IF NOT EXISTS queen.consumer_retry_at (
  partition_id   UUID NOT NULL,
  consumer_group TEXT COLLATE "C" NOT NULL,
  retry_at       TIMESTAMPTZ NOT NULL,
  PRIMARY KEY (partition_id, consumer_group),
  FOREIGN KEY (partition_id, consumer_group) REFERENCES queen.partition_consumers (partition_id, consumer_group) ON DELETE CASCADE
);
