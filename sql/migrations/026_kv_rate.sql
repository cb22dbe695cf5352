-- 026: the cell's rate buckets, shared by every API process of the cell (services/api/rate/store.ts;
-- the lease is sql/functions/kv_rate.sql). One row per (tenant, scope): scope 'tenant_reads' or
-- 'tenant_writes' per tenant, and 'cell' under tenant '' for the cell ceiling.
-- UNLOGGED: a bucket is a few seconds of state; after a crash every bucket starts full, which is
-- what an idle bucket is anyway. No WAL, no replica traffic for it.

CREATE UNLOGGED TABLE IF NOT EXISTS queen.kv_rate_bucket (
  tenant TEXT COLLATE "C" NOT NULL,
  scope  TEXT COLLATE "C" NOT NULL,
  tokens DOUBLE PRECISION NOT NULL,
  at     TIMESTAMPTZ NOT NULL,
  PRIMARY KEY (tenant, scope)
);

-- The API processes seen lately: a process falls back to 1/(this count) of every limit when it
-- cannot reach this table, so it must know how many there were.
CREATE UNLOGGED TABLE IF NOT EXISTS queen.kv_rate_process (
  process TEXT COLLATE "C" PRIMARY KEY,
  seen_at TIMESTAMPTZ NOT NULL
);
