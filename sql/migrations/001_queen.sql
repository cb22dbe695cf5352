-- 001: the queen schema and the cell's system state.
--
-- A migration holds what the schema is made of (tables, indexes, sequences, their data moves) and
-- runs once per database, in version order (shared/migrations.ts, docs/deploy.md). The functions
-- are not migrations: they are sql/functions/, one file per family, applied again whenever a file
-- changes. Migrations 001 to 032 are the baseline: a database of a release from before versioning
-- gets them run over its live schema, so every statement in them is idempotent, and none may take an
-- ACCESS EXCLUSIVE lock on a table that already exists (a boot beside a running cell must not stall
-- its traffic). A statement of an applied migration is never edited: a change is a new numbered
-- file. Its comments may be corrected: the checksum leaves them out.

CREATE SCHEMA IF NOT EXISTS queen;

-- Operator switches and other cell-wide facts. An absent row means the default (for the kill
-- switches: on), so a fresh cell never boots with a surface dead and no row to explain why.
CREATE TABLE IF NOT EXISTS queen.system_state (
  key        TEXT PRIMARY KEY,
  value      JSONB NOT NULL,
  updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Earlier copies of the shared helpers (sql/functions/queen.sql), one per surface; nothing calls them.
DROP FUNCTION IF EXISTS queen.kv_fail_v1(TEXT, TEXT, INT);
DROP FUNCTION IF EXISTS queen.log_fail_v1(TEXT, TEXT, INT);
DROP FUNCTION IF EXISTS queen.log_ts_v1(TIMESTAMPTZ);
DROP FUNCTION IF EXISTS queen.log_uuid_ok_v1(TEXT);
