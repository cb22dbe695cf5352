-- 041: the tables of the incremental usage rollup: per relation ('kv' or 'timers') the slices of
-- heap pages that cover it, when each was counted, its count per tenant and their sum. Only
-- queen.kv_usage_rollup_v2 writes them; sql/functions/kv_usage.sql says how and why it can be trusted.

CREATE TABLE IF NOT EXISTS queen.kv_usage_layout (
  rel       TEXT PRIMARY KEY CHECK (rel IN ('kv', 'timers')),
  -- pg_relation_filenode() when the layout was built: another means the relation was rewritten.
  filenode  OID NOT NULL,
  -- Heap pages a slice: fixed when the layout is built (a later call asking another size does not
  -- rebuild it, so sweepers of two releases never take turns resetting it).
  pages     INT NOT NULL CHECK (pages > 0),
  slices    INT NOT NULL CHECK (slices > 0),
  -- An instant at which the relation had at most slices * pages pages.
  cover_at  TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS queen.kv_usage_slice (
  rel        TEXT NOT NULL,
  slice      INT NOT NULL,
  -- The start of the transaction that last counted it; NULL: not counted since the layout was built.
  counted_at TIMESTAMPTZ,
  PRIMARY KEY (rel, slice)
);
CREATE TABLE IF NOT EXISTS queen.kv_usage_part (
  rel       TEXT NOT NULL,
  slice     INT NOT NULL,
  tenant_id UUID NOT NULL,
  rows      BIGINT NOT NULL,
  bytes     BIGINT NOT NULL,
  PRIMARY KEY (rel, slice, tenant_id)
);

-- The rows of a slice's count written after the measurement's computed_at could be (created_at
-- later than the oldest counted_at when the slice was counted), per tenant and millisecond of
-- created_at. They are counted in the slice, and left out of what is published while they are newer
-- than its computed_at (see the header). Entries no newer than a published computed_at are deleted:
-- computed_at never goes back.
CREATE TABLE IF NOT EXISTS queen.kv_usage_recent (
  rel       TEXT NOT NULL,
  slice     INT NOT NULL,
  tenant_id UUID NOT NULL,
  created   TIMESTAMPTZ NOT NULL,
  rows      BIGINT NOT NULL,
  bytes     BIGINT NOT NULL,
  PRIMARY KEY (rel, slice, tenant_id, created)
);
CREATE TABLE IF NOT EXISTS queen.kv_usage_total (
  tenant_id   UUID PRIMARY KEY,
  rows        BIGINT NOT NULL DEFAULT 0,
  bytes       BIGINT NOT NULL DEFAULT 0,
  timers      BIGINT NOT NULL DEFAULT 0,
  timer_bytes BIGINT NOT NULL DEFAULT 0
);
