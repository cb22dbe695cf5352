-- 024: queen.kv, its sequence, its one index, and the two side tables (quota and usage).
-- Decisions inside it, briefly:
--  * COLLATE "C" on both name columns is the foundation of the lock order (rows are taken in
--    ascending (namespace, key) byte order, identical on every host whatever its libc or ICU) and
--    keeps prefix scans and keyset cursors stable across machines.
--  * tenant_id is part of the primary key, so a conflict target can never be cross-tenant.
--  * shard is generated and stored with a fixed modulus of 64: no update can move a row.
--  * fillfactor = 70: steady state is in-place updates of non-indexed columns, which stay HOT when
--    the page has room. Measured against 90 and 100 at 100,000 keys (bench/README.md,
--    "fillfactor of queen.kv"): 100.0 % of updates HOT at 70, 99.9 % at 90, 85 % at 100 (with twice
--    the dead tuples); a table loaded at 70 is 30 % larger than at 90 and 44 % larger than at 100.
--  * vacuum_truncate = off: heap truncation takes ACCESS EXCLUSIVE, which conflicts with every MVCC
--    read's ACCESS SHARE; on this table that setting is part of the lock order.
--  * No ALTER COLUMN ... SET STORAGE: EXTENDED is already jsonb's default, and the statement would
--    take ACCESS EXCLUSIVE at every boot.

CREATE TABLE IF NOT EXISTS queen.kv (
  tenant_id  UUID NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001',
  namespace  TEXT COLLATE "C" NOT NULL,
  key        TEXT COLLATE "C" NOT NULL,
  value      JSONB NOT NULL,
  version    BIGINT NOT NULL,
  expires_at TIMESTAMPTZ,
  shard      SMALLINT NOT NULL GENERATED ALWAYS AS ((hashtextextended(key, 0) & 63)::smallint) STORED,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (tenant_id, namespace, key)
) WITH (fillfactor = 70, vacuum_truncate = off);

-- The version is a token drawn from a sequence: unique, opaque, not monotonic, compared for equality
-- only. A sequence rather than version + 1, so a key that expired, was pruned and was written again
-- can never re-issue a version a long-lived holder still carries. CACHE 1000 keeps nextval from
-- writing a WAL record per write.
CREATE SEQUENCE IF NOT EXISTS queen.kv_version_seq AS BIGINT CACHE 1000;

-- The one secondary index. Its only reader is the sweeper (filter by shard, range-scan expires_at);
-- partial, so a forever key costs nothing in it. Deliberately not created: an index on updated_at
-- (no reader, and it would make every counter update non-HOT) and one on value (no query to serve).
-- Guarded by a catalog check rather than IF NOT EXISTS: CREATE INDEX takes a SHARE lock on the
-- table before it looks for the name, and inside the boot transaction that lock would queue every
-- KV write behind any long transaction until the boot commits.
DO $$
BEGIN
  IF to_regclass('queen.idx_kv_shard_expires') IS NULL THEN
    CREATE INDEX idx_kv_shard_expires ON queen.kv (shard, expires_at) WHERE expires_at IS NOT NULL;
  END IF;
END $$;

-- Configuration, written by an operator. A null limit means unlimited only where docs/operations.md says a limit may be.
CREATE TABLE IF NOT EXISTS queen.kv_quota (
  tenant_id  UUID PRIMARY KEY,
  granted    BOOLEAN NOT NULL DEFAULT true,
  enabled    BOOLEAN NOT NULL DEFAULT true,
  max_rows   BIGINT,
  max_bytes  BIGINT,
  max_timers BIGINT,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Measurement, overwritten by the sweeper on its slow cadence; last writer wins on computed_at.
-- Two tables because two authors: merged, "who wrote this number?" would have no answer.
-- No write path touches either table: a per-tenant counter row locked by every write would be a
-- throughput ceiling of one bundle at a time per tenant, in the outermost lock space.
CREATE TABLE IF NOT EXISTS queen.kv_usage (
  tenant_id   UUID PRIMARY KEY,
  rows        BIGINT NOT NULL DEFAULT 0,
  bytes       BIGINT NOT NULL DEFAULT 0,
  timers      BIGINT NOT NULL DEFAULT 0,
  timer_bytes BIGINT NOT NULL DEFAULT 0,
  computed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
