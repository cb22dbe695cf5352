-- 010: the message log, minimal and real (docs/log-and-transactions.md). Queues, their partitions, the messages,
-- and per (partition, consumer group) the cursor and the lease. The rules are in sql/functions/log_push.sql,
-- log_consume.sql and log_apply.sql.
--
-- Decisions, briefly:
--  * A message's place in its partition is `seq`, drawn from the partition row's own counter while
--    that row is locked (queen.log_push_v1). Pushes to one partition therefore commit in seq order,
--    so a consumer can never advance its cursor past a message that commits later with a smaller
--    seq (the hole a global sequence would leave between two concurrent pushes).
--  * transaction_id is unique per partition: the push dedup key and, for timers, the fence that
--    makes a fire impossible to duplicate.
--  * One row per (partition, consumer group) holds everything a group knows about a partition: the
--    cursor, the acks that arrived ahead of it, the lease. Its row lock is the partition-for-this-group
--    lock: pop takes it with SKIP LOCKED, ack takes it and waits.
--  * COLLATE "C" on every name: lock order and sorting identical on every host.
--  * Nothing here takes ACCESS EXCLUSIVE on an existing table at boot (CREATE ... IF NOT EXISTS only),
--    but once: the boot that first finds a queues table from before tenancy (below, bounded).
--  * Tenancy: a queue belongs to a tenant; every procedure of 011 takes the tenant and finds a
--    queue, partition, message or lease only through the tenant's own queues.

CREATE TABLE IF NOT EXISTS queen.queues (
  id          UUID PRIMARY KEY DEFAULT gen_random_uuid(),
  name        TEXT COLLATE "C" NOT NULL,
  -- Seconds a pop's lease lasts before the messages become available to the group again.
  lease_time  INTEGER NOT NULL DEFAULT 300 CHECK (lease_time > 0),
  -- Failed deliveries a message may take and still be redelivered; one more sets it aside (dead
  -- letter). A failed delivery is a `failed` ack, or a lease that expired holding it unacked.
  retry_limit INTEGER NOT NULL DEFAULT 3 CHECK (retry_limit >= 0),
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  -- The tenant owning the queue, and through it its partitions, messages, consumer groups and dead
  -- letters: a queue name, and a transactionId in it, is unique per tenant. Last, so a table that
  -- predates tenancy gains it (below) and ends up column for column what a fresh one is. The
  -- default is the cell's default tenant (shared/config.ts DEFAULT_TENANT), as on queen.kv.
  tenant_id   UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
  CONSTRAINT queues_tenant_id_name_key UNIQUE (tenant_id, name)
);

-- A queues table from before tenancy (name alone unique): its rows become the default tenant's.
-- Once in a cell's life, behind a catalog check. The lock: ACCESS EXCLUSIVE on queen.queues (ALTER
-- TABLE), which every push, pop, ack and configure waits behind, held from here to this boot's
-- commit: the rest of the apply, function definitions (100-210 ms measured on a shared 2-core
-- machine, 2026-12-01), plus the unique index built over the queues rows (one per queue). ADD
-- COLUMN with a constant default rewrites nothing (PostgreSQL 11 and later store it once). A lock
-- request queues the traffic behind it while it waits, so each attempt waits at most 200 ms
-- (lock_timeout), and a refused attempt is retried after a 100 ms pause that lets the queued traffic
-- through, up to 50 times (about 15 s); then the boot fails, saying so, and nothing has changed.
-- test/boot/schema.test.ts holds it to that.
DO $$
DECLARE
  v_attempt INT := 0;
  v_lock_timeout TEXT := current_setting('lock_timeout');
BEGIN
  IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'queen.queues'::regclass AND attname = 'tenant_id' AND NOT attisdropped) THEN
    RETURN;
  END IF;
  LOOP
    BEGIN
      PERFORM set_config('lock_timeout', '200ms', true);
      ALTER TABLE queen.queues ADD COLUMN tenant_id UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
        ADD CONSTRAINT queues_tenant_id_name_key UNIQUE (tenant_id, name),
        DROP CONSTRAINT IF EXISTS queues_name_key;
      EXIT;
    EXCEPTION WHEN lock_not_available THEN
      v_attempt := v_attempt + 1;
      IF v_attempt >= 50 THEN
        RAISE EXCEPTION 'queen.queues gains tenant_id once, under a brief ACCESS EXCLUSIVE lock, and 50 attempts of 200 ms each found it held; boot again when the transactions holding queen.queues have ended';
      END IF;
    END;
    PERFORM pg_sleep(0.1);
  END LOOP;
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
END $$;

-- Queen's two options that hold delivery back, per queue (POST /api/v1/configure): a message is
-- not delivered until it is delayed_processing seconds old, and a partition not until its newest
-- message is window_buffer seconds old (the partition has been quiet that long). Both are read by
-- the pop (queen.log_pop_v1), so a change applies to the messages already waiting too, as on
-- Queen's server. A table of its own, beside queues, so no boot alters an existing table; a row
-- only for a queue that was configured with either option.
CREATE TABLE IF NOT EXISTS queen.queue_delays (
  queue_id           UUID PRIMARY KEY REFERENCES queen.queues (id) ON DELETE CASCADE,
  delayed_processing INTEGER NOT NULL DEFAULT 0 CHECK (delayed_processing BETWEEN 0 AND 86400),
  window_buffer      INTEGER NOT NULL DEFAULT 0 CHECK (window_buffer BETWEEN 0 AND 86400)
);
CREATE TABLE IF NOT EXISTS queen.partitions (
  id         UUID PRIMARY KEY DEFAULT gen_random_uuid(),
  queue_id   UUID NOT NULL REFERENCES queen.queues (id) ON DELETE CASCADE,
  name       TEXT COLLATE "C" NOT NULL,
  -- The seq of the newest message; bumped only under this row's lock, only when a message is stored.
  last_seq   BIGINT NOT NULL DEFAULT 0,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  UNIQUE (queue_id, name)
);
CREATE TABLE IF NOT EXISTS queen.messages (
  partition_id   UUID NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
  seq            BIGINT NOT NULL,
  transaction_id TEXT COLLATE "C" NOT NULL,
  payload        JSONB,
  created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (partition_id, seq),
  UNIQUE (partition_id, transaction_id)
);
CREATE TABLE IF NOT EXISTS queen.partition_consumers (
  partition_id     UUID NOT NULL REFERENCES queen.partitions (id) ON DELETE CASCADE,
  consumer_group   TEXT COLLATE "C" NOT NULL,
  -- Every message with seq <= cursor_seq is finished for this group (completed or dead-lettered).
  cursor_seq       BIGINT NOT NULL DEFAULT 0,
  -- Finished messages ahead of the cursor (an ack that overtook an earlier failed one); folded into
  -- the cursor as soon as the gap closes. Bounded by the pop batch size.
  done_seqs        BIGINT[] NOT NULL DEFAULT '{}',
  -- The lease: one consumer of the group holds the partition until it expires or every leased
  -- message is settled. The lease id is the fencing token an ack may carry.
  lease_id         UUID,
  lease_expires_at TIMESTAMPTZ,
  lease_seqs       BIGINT[] NOT NULL DEFAULT '{}',
  -- Leased messages acked `failed` under this lease: settled for the lease, redelivered after it,
  -- and already counted, so the lease's expiry does not count them again.
  lease_failed     BIGINT[] NOT NULL DEFAULT '{}',
  last_leased_at   TIMESTAMPTZ,
  -- Counters for operators: messages handed out, completed acks, failed deliveries (`failed` acks
  -- and messages an expired lease held unacked), messages set aside.
  deliveries       BIGINT NOT NULL DEFAULT 0,
  completed        BIGINT NOT NULL DEFAULT 0,
  failures         BIGINT NOT NULL DEFAULT 0,
  dead_letters     BIGINT NOT NULL DEFAULT 0,
  created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (partition_id, consumer_group)
);

-- POST /api/v1/lease/:leaseId/extend finds the lease by its id. Created only when missing:
-- CREATE INDEX IF NOT EXISTS takes a SHARE lock on the table even when it skips (measured on
-- PostgreSQL 17, 2026-11-29), and the schema apply holds it to commit, which would queue every
-- pop and ack of a running cell behind a booting one.
DO $$
BEGIN
  IF to_regclass('queen.idx_partition_consumers_lease') IS NULL THEN
    CREATE UNIQUE INDEX idx_partition_consumers_lease ON queen.partition_consumers (lease_id) WHERE lease_id IS NOT NULL;
  END IF;
END $$;

-- A pop of several partitions (Queen's `partitions` above 1) hands out one lease id for all of them,
-- the shared id; each partition keeps its own lease (lease_id above stays unique per row). Here, per
-- (partition, group), the shared id its current lease was handed out under: an ack or a lease extend
-- naming the shared id reaches the row whose lease is still `lease_id`. One row per
-- partition_consumers row at most (the next shared pop of it overwrites it), so it is bounded; a row
-- whose lease has since ended matches nothing.
CREATE TABLE IF NOT EXISTS queen.shared_leases (
  partition_id   UUID NOT NULL,
  consumer_group TEXT COLLATE "C" NOT NULL,
  shared_id      UUID NOT NULL,
  lease_id       UUID NOT NULL,
  PRIMARY KEY (partition_id, consumer_group),
  FOREIGN KEY (partition_id, consumer_group) REFERENCES queen.partition_consumers (partition_id, consumer_group) ON DELETE CASCADE
);
DO $$
BEGIN
  IF to_regclass('queen.idx_shared_leases_shared_id') IS NULL THEN
    CREATE INDEX idx_shared_leases_shared_id ON queen.shared_leases (shared_id);
  END IF;
END $$;

-- Per message and group: how many failed deliveries it took (`failed` acks and expired leases that
-- held it unacked), and the dead-letter marker. A row exists only for messages that failed at least once.
CREATE TABLE IF NOT EXISTS queen.message_failures (
  partition_id     UUID NOT NULL,
  consumer_group   TEXT COLLATE "C" NOT NULL,
  seq              BIGINT NOT NULL,
  failures         INTEGER NOT NULL DEFAULT 0,
  last_failed_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  -- Set when the failures passed the queue's retry_limit: the message is set aside for this group.
  dead_lettered_at TIMESTAMPTZ,
  PRIMARY KEY (partition_id, consumer_group, seq),
  FOREIGN KEY (partition_id, seq) REFERENCES queen.messages (partition_id, seq) ON DELETE CASCADE
);
DO $$
BEGIN
  IF to_regclass('queen.idx_message_failures_dead_letters') IS NULL THEN
    CREATE INDEX idx_message_failures_dead_letters
      ON queen.message_failures (partition_id, consumer_group, seq) WHERE dead_lettered_at IS NOT NULL;
  END IF;
END $$;

-- The text the last `failed` ack gave for a message and group (Queen's `error` on an ack), shown as
-- `errorMessage` by the dead-letter read. A table of its own, beside message_failures, so no boot
-- alters an existing table; at most 1,024 characters kept.
CREATE TABLE IF NOT EXISTS queen.message_failure_texts (
  partition_id   UUID NOT NULL,
  consumer_group TEXT COLLATE "C" NOT NULL,
  seq            BIGINT NOT NULL,
  error_message  TEXT NOT NULL,
  PRIMARY KEY (partition_id, consumer_group, seq),
  FOREIGN KEY (partition_id, seq) REFERENCES queen.messages (partition_id, seq) ON DELETE CASCADE
);
