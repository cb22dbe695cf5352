-- 057: a tenant moving between cells (docs/scaling.md, "Moving a tenant"). A row here pauses every
-- data call of that tenant on this cell (503 tenant_moving, read by each API worker with the grants,
-- admission/tenantBook.ts) and records how far the move got, so that a move stopped at any step is
-- run again from there (services/move/move.ts):
--   role 'source': the tenant's rows are here and the move is copying them away;
--   role 'target': the move is copying the tenant's rows in (kept until the router sends it here);
--   role 'moved':  the router sends the tenant elsewhere; a call that still reaches this cell is
--                  refused, and the rows left here are the move's to remove.
-- A tenant with no row is served as before. The move's own bookkeeping: never moved itself.
CREATE TABLE IF NOT EXISTS queen.tenant_moves (
  tenant_id  UUID PRIMARY KEY,
  role       TEXT NOT NULL CHECK (role IN ('source', 'target', 'moved')),
  peer       TEXT NOT NULL,
  step       TEXT NOT NULL,
  paused_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
