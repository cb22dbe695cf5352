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

-- The one way a procedure refuses bad input: SQLSTATE QK400 with DETAIL {"code", "index"}, which
-- shared/errors.ts turns into a 400 with that code. Every surface (KV, log, timers) raises through it.
CREATE OR REPLACE FUNCTION queen.fail_v1(p_code TEXT, p_message TEXT, p_index INT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QK400', MESSAGE = p_message,
    DETAIL = jsonb_build_object('code', p_code, 'index', p_index)::text;
END $$;

-- The one definition of a name: a KV namespace, a queue, a partition, a consumer group. 1 to 128
-- characters of A-Z a-z 0-9 _ . : -, not starting with . : or -, so a name is safe in a URL path
-- segment, a log line and a NOTIFY payload. The bound is a length, not {0,127}: the bounded
-- regex builds a large automaton on every call (about 4.5 µs). A single SQL expression: inlined
-- wherever it is called, so the fast paths pay nothing for calling it.
CREATE OR REPLACE FUNCTION queen.name_ok_v1(p_name TEXT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]*$' AND length(p_name) <= 128
$$;

-- Earlier copies of it, one per surface; nothing calls them any more.
DROP FUNCTION IF EXISTS queen.kv_fail_v1(TEXT, TEXT, INT);
DROP FUNCTION IF EXISTS queen.log_fail_v1(TEXT, TEXT, INT);
