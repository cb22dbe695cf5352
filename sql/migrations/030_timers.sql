-- 030: timers (a message promised now and delivered later) and the sweeper's claim targets.
-- Decisions, briefly:
--  * timer_id is the identity and the source of the fired message's transactionId
--    ('timer:' || timer_id), so a fire can never store a message twice even if it ran twice.
--  * shard is generated from the id with the same modulus as queen.kv (64), so one claimed row of
--    queen.sweeper_shards covers the same shard of both tables; generated and stored, no update
--    can move a timer to another shard.
--  * deliver_at is stored at millisecond precision (the procedures truncate), so the ISO text the
--    wire shows is exactly the stored value and a keyset cursor built from it is exact.
--  * timer_key is unique per tenant only when given: a partial unique index, so timers without a
--    key cost nothing in it.

CREATE TABLE IF NOT EXISTS queen.log_timers (
  timer_id   UUID PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id  UUID NOT NULL,
  timer_key  TEXT COLLATE "C",
  queue      TEXT NOT NULL,
  partition  TEXT NOT NULL DEFAULT 'Default',
  payload    JSONB NOT NULL,
  deliver_at TIMESTAMPTZ NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  shard      SMALLINT NOT NULL GENERATED ALWAYS AS ((uuid_hash_extended(timer_id, 0) & 63)::smallint) STORED
) WITH (vacuum_truncate = off);

-- Indexes are created only when missing, by name: CREATE INDEX IF NOT EXISTS takes a SHARE lock on
-- the table before it looks, and at a boot beside running sweepers that lock waited on a pass (which
-- holds log_timers rows and then wants queen.kv, whose SHARE lock this same boot transaction already
-- held from 024): a deadlock, seen 2026-11-29 when three sweeper processes booted at once.
DO $$
BEGIN
  -- Per shard, oldest due first (timer_id the tie-breaker): what firing claimed by before it went
  -- cell-wide; kept, since an index cannot be dropped at boot without an ACCESS EXCLUSIVE lock.
  IF to_regclass('queen.idx_log_timers_shard_due') IS NULL THEN
    CREATE INDEX idx_log_timers_shard_due ON queen.log_timers (shard, deliver_at, timer_id);
  END IF;
  -- The fire's claim: the cell's oldest due timers first, whatever their shard (queen.timers_fire_v1).
  -- Built once, on the first boot that lacks it: CREATE INDEX takes a SHARE lock on log_timers (no
  -- schedule, cancel or fire commits meanwhile; reads go on) for the build, one pass over the table.
  IF to_regclass('queen.idx_log_timers_due') IS NULL THEN
    CREATE INDEX idx_log_timers_due ON queen.log_timers (deliver_at, timer_id);
  END IF;
  -- The list route's keyset, per tenant by (deliver_at, timer_id).
  IF to_regclass('queen.idx_log_timers_tenant_due') IS NULL THEN
    CREATE INDEX idx_log_timers_tenant_due ON queen.log_timers (tenant_id, deliver_at, timer_id);
  END IF;
  IF to_regclass('queen.idx_log_timers_tenant_key') IS NULL THEN
    CREATE UNIQUE INDEX idx_log_timers_tenant_key ON queen.log_timers (tenant_id, timer_key)
      WHERE timer_key IS NOT NULL;
  END IF;
END $$;

-- One row per shard: what a sweeper locks (FOR UPDATE SKIP LOCKED) for the duration of the work on
-- that shard, so two sweepers never work one shard at once; last_swept_at orders the claim (least
-- recently swept first), so a dead sweeper's shards are the oldest and are taken within a cycle.
CREATE TABLE IF NOT EXISTS queen.sweeper_shards (
  shard         SMALLINT PRIMARY KEY CHECK (shard BETWEEN 0 AND 63),
  last_swept_at TIMESTAMPTZ,
  swept_by      TEXT
);

-- Only the missing rows: a boot beside running sweepers must not touch the rows they hold.
INSERT INTO queen.sweeper_shards (shard)
SELECT s::smallint FROM generate_series(0, 63) AS s
WHERE NOT EXISTS (SELECT 1 FROM queen.sweeper_shards x WHERE x.shard = s)
ON CONFLICT (shard) DO NOTHING;
