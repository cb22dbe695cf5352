-- 001: the queen schema and the cell's system state.
-- Every sql/NNN_*.sql file is applied in full at every boot, in file order, in one transaction
-- under an advisory lock (shared/db.ts). So every statement here is idempotent, and none may take
-- an ACCESS EXCLUSIVE lock on a table that already exists: a boot beside a running cell must not
-- stall its traffic.

CREATE SCHEMA IF NOT EXISTS queen;

-- Operator switches and other cell-wide facts. An absent row means the default (for the kill
-- switches: on), so a fresh cell never boots with a surface dead and no row to explain why.
CREATE TABLE IF NOT EXISTS queen.system_state (
  key        TEXT PRIMARY KEY,
  value      JSONB NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
