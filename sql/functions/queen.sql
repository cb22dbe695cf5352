-- The helpers every surface shares: the refusal, array lengths, timestamps, the UUID and name
-- rules, and the limits with their defaults (queen.limit_v1).

-- The one way a procedure refuses bad input: SQLSTATE QK400 with DETAIL {"code", "index"}, which
-- shared/errors.ts turns into a 400 with that code. Every surface (KV, log, timers) raises through it.
CREATE OR REPLACE FUNCTION queen.fail_v1(p_code TEXT, p_message TEXT, p_index INT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QK400', MESSAGE = p_message,
    DETAIL = jsonb_build_object('code', p_code, 'index', p_index)::text;
END $$;

-- The refusal of a tenant in a move between cells (queen.tenant_moves): every function a data call
-- of the API reaches runs it first, `FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant`, so it
-- runs only for a tenant with a row. The API refuses such a tenant before it reads a body, from its
-- copy of the rows; this is the refusal that cannot be stale. A call admitted before its worker read
-- a pause, then held for longer than the move's fence (a slow body, a pool queue), meets it here.
-- Read in the call's own transaction, so the call either saw no pause and began before the pause
-- committed (the move's fence waits for it), or is refused. DETAIL carries the role, which decides
-- the message (shared/errors.ts, tenantMoving).
CREATE OR REPLACE FUNCTION queen.tenant_moving_v1(p_tenant UUID) RETURNS JSONB
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QK400', MESSAGE = 'tenant_moving',
    DETAIL = jsonb_build_object('code', 'tenant_moving', 'role', (SELECT m.role FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant))::text;
END $$;

-- The same refusal as a call, NULL for a tenant not moving: the form for functions in LANGUAGE sql
-- (plpgsql ones run the probe above themselves, which calls nothing for a tenant with no row). The
-- KV entry points (queen.kv_apply_v1, queen.kv_apply_one_v1) are inlined into the caller's
-- statement; a sub-SELECT in their bodies stopped the inlining, and each call then planned the
-- function again (about 60 µs).
CREATE OR REPLACE FUNCTION queen.tenant_gate_v1(p_tenant UUID) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  RETURN NULL;
END $$;

-- The length of a request's array (items, acks, operations): refused with p_code and p_message
-- unless it is a non-empty JSON array, and past p_max (NULL: no bound) with p_big_code and
-- p_big_message, formatted with the length and the bound.
CREATE OR REPLACE FUNCTION queen.array_length_v1(
  p_array JSONB, p_code TEXT, p_message TEXT, p_index INT,
  p_max BIGINT DEFAULT NULL, p_big_code TEXT DEFAULT NULL, p_big_message TEXT DEFAULT NULL
) RETURNS INT LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF jsonb_typeof(p_array) IS DISTINCT FROM 'array' OR jsonb_array_length(p_array) = 0 THEN
    PERFORM queen.fail_v1(p_code, p_message, p_index);
  END IF;
  IF jsonb_array_length(p_array) > p_max THEN
    PERFORM queen.fail_v1(p_big_code, format(p_big_message, jsonb_array_length(p_array), p_max), NULL);
  END IF;
  RETURN jsonb_array_length(p_array);
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

-- The refusal of a name that is NULL or not a name: p_code, with p_what ('A queue name', 'A
-- consumer group', ...) in the one sentence every surface gives it.
CREATE OR REPLACE FUNCTION queen.check_name_v1(p_name TEXT, p_code TEXT, p_what TEXT) RETURNS VOID
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_name IS NULL OR NOT queen.name_ok_v1(p_name) THEN
    PERFORM queen.fail_v1(p_code, p_what || ' is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
END $$;

-- Instants on the wire: ISO 8601 in UTC with milliseconds, whatever the session's TimeZone. The
-- KV, the log and the timers all write their timestamps through this one function.
CREATE OR REPLACE FUNCTION queen.ts_v1(TIMESTAMPTZ) RETURNS TEXT
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT to_char($1 AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- A UUID as text, in either case: a timer id, a partition id, a lease id, a timer page's cursor.
-- The pattern alone (queen.timers_list_v1 embeds it in its cursor's), and the test, never true of NULL.
CREATE OR REPLACE FUNCTION queen.uuid_pattern_v1() RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
$$;
-- The test is the pattern's, by three cheap checks: PostgreSQL's regex engine takes about 9 µs to
-- match the pattern's 36 fixed positions, and every ack checks two ids (these take 2 µs). The
-- shape (36 characters, hyphens at 9, 14, 19 and 24), every character a hex digit or a hyphen, and
-- no fifth hyphen: the 32 others are hex digits. test/log/uuidCheck.test.ts holds it to the pattern.
CREATE OR REPLACE FUNCTION queen.uuid_ok_v1(p_text TEXT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_text IS NOT NULL AND p_text LIKE '________-____-____-____-____________' AND p_text ~ '^[0-9a-fA-F-]+$'
         AND p_text NOT LIKE '%-%-%-%-%-%'
$$;

-- The configurable limits, read here and only here: the session settings the pools send at connect
-- (shared/config.ts, kvSessionSettings), each with the configuration's default for a session that
-- did not send it. NULL for a name that is not one of them. A single SQL expression: inlined where
-- it is called with a constant name, the CASE folds away and the call costs one setting lookup.
CREATE OR REPLACE FUNCTION queen.limit_v1(p_name TEXT) RETURNS BIGINT
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT coalesce(nullif(current_setting('queen.' || p_name, true), '')::bigint,
                  CASE p_name WHEN 'kv_max_batch' THEN 1000 WHEN 'kv_prefix_limit' THEN 1000
                              WHEN 'kv_max_read_bytes' THEN 4194304
                              WHEN 'timers_max_horizon_seconds' THEN 31536000
                              WHEN 'timers_max_payload_bytes' THEN 65536 END)
$$;

-- The fixed bounds of a KV entry, not configurable: a key is 1 to 512 bytes of UTF-8, a value (and
-- so a counter, and an incr's delta) at most 65536 bytes as stored, a ttlSeconds at most 100 years.
-- Constants the planner folds into every expression that names them.
CREATE OR REPLACE FUNCTION queen.kv_max_key_bytes_v1() RETURNS INT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 512 $$;
CREATE OR REPLACE FUNCTION queen.kv_max_value_bytes_v1() RETURNS INT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 65536 $$;
CREATE OR REPLACE FUNCTION queen.kv_max_ttl_seconds_v1() RETURNS BIGINT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 3155760000 $$;

-- The name the previous release's API still calls (shared/sql/system.ts); drop it one release later.
CREATE OR REPLACE FUNCTION queen.kv_ts_v1(TIMESTAMPTZ) RETURNS TEXT
LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT queen.ts_v1($1) $$;
