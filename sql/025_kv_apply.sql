-- 025: the KV rules, written once. queen.kv_apply_v1 is the one procedure behind every KV route and
-- behind the transaction wire's `kv` array; TypeScript only carries JSON text in and out.
--
-- Shape of a call: validate every operation in request order (the first bad one is the 400, with
-- its index), refuse a batch that touches one key twice, then run the operations with single-key
-- operations in ascending (namespace, key) COLLATE "C" order (the lock order), then the multi-key
-- reads, and answer in request order. One instant (p_now) decides every expiry in the batch.
--
-- Errors are raised with SQLSTATE QK400 and DETAIL {"code", "index"}. Raising aborts the
-- transaction: everything in the call, and in a transaction-wire bundle everything beside it, rolls
-- back. A refusal's message names the field and the kind of JSON it got, never what the client sent
-- in it: PostgreSQL logs every raised error with its DETAIL, HINT and statement (log_min_messages
-- defaults to WARNING, log_min_error_statement to ERROR), and a field filled by mistake may hold a value.
--
-- A lost `required` precondition is not an error: it is the verdict {"ok": false, "success": false,
-- "reason": "kv_precondition", "failedIndex", "kvReason", "version", "value"} returned in place of
-- the answers array, with every write of the call undone (kv_apply_at_v1 runs the writes in a
-- sub-block whose handler rolls them back). It used to be raised with the winner's value in its
-- HINT, and PostgreSQL logged that line, value included, on every lost race (2026-12-01). A caller
-- that does more in the same transaction must stop there: the transaction wire runs nothing after
-- a verdict (shared/lockOrder.ts).

-- The only definition of existence. Pure, not STRICT (a NULL expiry means forever and must answer
-- true), `now` a parameter so one call uses one instant.
CREATE OR REPLACE FUNCTION queen.kv_live_v1(TIMESTAMPTZ, TIMESTAMPTZ) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT $1 IS NULL OR $1 > $2 $$;

-- The effective version, total: 0 for an absent row and for an expired one. That is what lets
-- expect: 0 mean "must not exist" and why a compare-and-set against a dead lineage cannot succeed.
-- Arguments: version, expires_at, now.
CREATE OR REPLACE FUNCTION queen.kv_ver_v1(BIGINT, TIMESTAMPTZ, TIMESTAMPTZ) RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN $1 IS NOT NULL AND queen.kv_live_v1($2, $3) THEN $1 ELSE 0 END
$$;

-- Timestamps on the wire: ISO 8601 in UTC with milliseconds, whatever the session's TimeZone.
CREATE OR REPLACE FUNCTION queen.kv_ts_v1(TIMESTAMPTZ) RETURNS TEXT
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT to_char($1 AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- The smallest string above every string that starts with the prefix, in byte (= code point) order:
-- the prefix with its last character incremented. NULL when there is none (a run of U+10FFFF).
CREATE OR REPLACE FUNCTION queen.kv_prefix_upper_v1(p_prefix TEXT) RETURNS TEXT
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v_head TEXT := p_prefix;
  v_last INT;
BEGIN
  WHILE length(v_head) > 0 LOOP
    v_last := ascii(right(v_head, 1));
    v_head := left(v_head, -1);
    IF v_last < 1114111 THEN
      v_last := v_last + 1;
      IF v_last BETWEEN 55296 AND 57343 THEN v_last := 57344; END IF; -- skip the surrogates
      RETURN v_head || chr(v_last);
    END IF;
  END LOOP;
  RETURN NULL;
END $$;

-- A row as the wire shows it.
CREATE OR REPLACE FUNCTION queen.kv_row_json_v1(r queen.kv) RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object('key', r.key, 'value', r.value, 'version', r.version,
                            'expiresAt', queen.kv_ts_v1(r.expires_at), 'updatedAt', queen.kv_ts_v1(r.updated_at))
$$;

-- The answer to every write, applied or not: the current value and version come back either way,
-- so the loser of a race needs no second round trip. `r` is the row there now (NULL when none).
-- LANGUAGE sql and one expression, so the planner inlines it into the statement that calls it:
-- a write's RETURNING (or the SELECT after a lost precondition) builds its own answer.
CREATE OR REPLACE FUNCTION queen.kv_write_answer_v1(
  p_index INT, p_op TEXT, p_key TEXT, p_applied BOOLEAN, p_reason TEXT, r queen.kv, p_now TIMESTAMPTZ
) RETURNS JSONB LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN r.key IS NOT NULL AND queen.kv_live_v1(r.expires_at, p_now)
           THEN jsonb_build_object('index', p_index, 'op', p_op, 'key', p_key, 'applied', p_applied, 'found', true,
                                   'value', r.value, 'version', r.version,
                                   'expiresAt', queen.kv_ts_v1(r.expires_at), 'updatedAt', queen.kv_ts_v1(r.updated_at))
           ELSE jsonb_build_object('index', p_index, 'op', p_op, 'key', p_key, 'applied', p_applied, 'found', false,
                                   'value', 'null'::jsonb, 'version', 0, 'expiresAt', NULL, 'updatedAt', NULL) END
         || CASE WHEN p_applied THEN '{}'::jsonb ELSE jsonb_build_object('reason', p_reason) END
$$;

-- What kind of JSON a field holds, for a refusal's sentence: a refusal says this, never the JSON
-- itself (see the header: PostgreSQL logs every refusal's message).
CREATE OR REPLACE FUNCTION queen.json_kind_v1(p JSONB) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE jsonb_typeof(p) WHEN 'object' THEN 'an object' WHEN 'array' THEN 'an array' WHEN 'string' THEN 'a string'
           WHEN 'number' THEN 'a number' WHEN 'boolean' THEN 'a boolean' WHEN 'null' THEN 'null' ELSE 'nothing' END
$$;

-- Validates one operation and returns it normalised: {i, op, kind, ns, key | keys | prefix, ...}.
-- `putIfAbsent` desugars here to kind put with expect 0: one path, one taxonomy.
CREATE OR REPLACE FUNCTION queen.kv_check_op_v1(
  p_op JSONB, p_index INT, p_in_transaction BOOLEAN, p_now TIMESTAMPTZ
) RETURNS JSONB LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_name TEXT;
  v_kind TEXT;
  v_ns JSONB;
  v_out JSONB;
  v_key JSONB;
  v_ttl JSONB;
  v_forever JSONB;
  v_has_ttl BOOLEAN;
  v_is_forever BOOLEAN;
  v_expect JSONB;
  v_limit JSONB;
  v_limit_n NUMERIC;
  v_prefix_limit INT := coalesce(nullif(current_setting('queen.kv_prefix_limit', true), '')::int, 1000);
  v_max_batch INT := coalesce(nullif(current_setting('queen.kv_max_batch', true), '')::int, 1000);
  v_min JSONB;
  v_max JSONB;
  v_fields TEXT[];
  v_unknown JSONB;
BEGIN
  IF jsonb_typeof(p_op) IS DISTINCT FROM 'object' THEN
    PERFORM queen.fail_v1('kv_unknown_op', format('Operation %s is not a JSON object.', p_index), p_index);
  END IF;
  v_name := CASE WHEN jsonb_typeof(p_op->'op') = 'string' THEN p_op->>'op' END;
  v_kind := CASE v_name
    WHEN 'get' THEN 'get' WHEN 'getMany' THEN 'getMany' WHEN 'getPrefix' THEN 'getPrefix'
    WHEN 'put' THEN 'put' WHEN 'putIfAbsent' THEN 'put' WHEN 'delete' THEN 'delete' WHEN 'incr' THEN 'incr' END;
  IF v_kind IS NULL THEN
    PERFORM queen.fail_v1('kv_unknown_op', format(
      'Operation %s has %s; it must be one of get, getMany, getPrefix, put, putIfAbsent, delete, incr.',
      p_index, CASE WHEN p_op ? 'op' THEN 'an op that is none of these' ELSE 'no op' END), p_index);
  END IF;

  v_ns := p_op->'ns';
  IF v_ns IS NULL OR v_ns = 'null'::jsonb OR v_ns = '""'::jsonb THEN
    PERFORM queen.fail_v1('kv_ns_required', format('Operation %s needs ns, the namespace.', p_index), p_index);
  END IF;
  IF jsonb_typeof(v_ns) <> 'string' OR NOT queen.name_ok_v1(v_ns #>> '{}') THEN
    PERFORM queen.fail_v1('kv_invalid_namespace', format(
      'Operation %s: ns is %s that is not a namespace; a namespace is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.',
      p_index, queen.json_kind_v1(v_ns)), p_index);
  END IF;
  v_out := jsonb_build_object('i', p_index, 'op', v_name, 'kind', v_kind, 'ns', v_ns);

  -- A field the operation does not take is refused, never ignored: a misspelled `expect` (expct,
  -- Expect) ignored is an unconditional write where a fence was meant, and nothing would say so.
  -- v_fields: what docs/kv.md gives each op; the fields after them are refused further down
  -- with a sentence of their own (required on a read, expect on putIfAbsent and incr, value on incr).
  v_fields := CASE v_name
    WHEN 'get' THEN '{ns,key}' WHEN 'getMany' THEN '{ns,keys}' WHEN 'getPrefix' THEN '{ns,prefix,limit,after}'
    WHEN 'put' THEN '{ns,key,value,ttlSeconds,forever,expect,required}'
    WHEN 'putIfAbsent' THEN '{ns,key,value,ttlSeconds,forever,required}'
    WHEN 'delete' THEN '{ns,key,expect,required}'
    WHEN 'incr' THEN '{ns,key,delta,min,max,ttlSeconds,forever,required}' END;
  v_unknown := p_op - v_fields - CASE v_kind WHEN 'incr' THEN '{op,value,expect}' WHEN 'put' THEN '{op,expect}' ELSE '{op,required}' END::text[];
  IF v_unknown <> '{}'::jsonb THEN
    PERFORM queen.fail_v1('kv_invalid_field', format(
      'Operation %s (%s) has a field %s does not take: %s. Its fields are op, %s.', p_index, v_name, v_name,
      (SELECT string_agg(left(f, 64), ', ' ORDER BY f) FROM jsonb_object_keys(v_unknown) f), array_to_string(v_fields, ', ')), p_index);
  END IF;

  IF p_op ? 'required' AND jsonb_typeof(p_op->'required') <> 'boolean' THEN
    PERFORM queen.fail_v1('kv_invalid_field', format('Operation %s: required must be true or false.', p_index), p_index);
  END IF;
  IF v_kind IN ('get', 'getMany', 'getPrefix') AND p_op ? 'required' THEN
    PERFORM queen.fail_v1('kv_invalid_field', format(
      'Operation %s: required applies to writes only; a read has no precondition to lose.', p_index), p_index);
  END IF;

  -- The key of single-key operations.
  IF v_kind IN ('get', 'put', 'delete', 'incr') THEN
    v_key := p_op->'key';
    PERFORM queen.kv_check_key_v1(v_key, p_index);
    v_out := v_out || jsonb_build_object('key', v_key);
  END IF;

  IF v_kind = 'getMany' THEN
    IF jsonb_typeof(p_op->'keys') IS DISTINCT FROM 'array' OR jsonb_array_length(p_op->'keys') = 0 THEN
      PERFORM queen.fail_v1('kv_key_required', format('Operation %s (getMany) needs keys, a non-empty array of keys.', p_index), p_index);
    END IF;
    IF jsonb_array_length(p_op->'keys') > v_max_batch THEN
      PERFORM queen.fail_v1('kv_batch_too_large', format(
        'Operation %s asks for %s keys; at most %s keys are read in one call.', p_index, jsonb_array_length(p_op->'keys'), v_max_batch), p_index);
    END IF;
    FOR v_key IN SELECT k FROM jsonb_array_elements(p_op->'keys') k LOOP
      PERFORM queen.kv_check_key_v1(v_key, p_index);
    END LOOP;
    RETURN v_out || jsonb_build_object('keys', p_op->'keys');
  END IF;

  IF v_kind = 'getPrefix' THEN
    IF p_in_transaction THEN
      PERFORM queen.fail_v1('kv_get_prefix_not_allowed_in_transaction', format(
        'Operation %s: getPrefix is unbounded read work and is not allowed inside a transaction; use POST /api/v1/kv.', p_index), p_index);
    END IF;
    IF jsonb_typeof(p_op->'prefix') IS DISTINCT FROM 'string' OR p_op->>'prefix' = '' THEN
      PERFORM queen.fail_v1('kv_prefix_required', format(
        'Operation %s (getPrefix) needs a non-empty prefix; a namespace is not a table to enumerate.', p_index), p_index);
    END IF;
    IF octet_length(p_op->>'prefix') > 512 THEN
      PERFORM queen.fail_v1('kv_key_too_long', format('Operation %s: the prefix is longer than 512 bytes, the longest key.', p_index), p_index);
    END IF;
    v_limit := p_op->'limit';
    IF v_limit IS NULL OR v_limit = 'null'::jsonb THEN
      v_limit_n := 100;
    ELSIF jsonb_typeof(v_limit) = 'number' THEN
      v_limit_n := floor(v_limit::numeric);
    ELSE
      PERFORM queen.fail_v1('kv_invalid_field', format('Operation %s: limit must be a number.', p_index), p_index);
    END IF;
    -- Clamped, never refused: a 400 on a high limit is an error the caller cannot fix without
    -- reading the server's configuration.
    v_limit_n := least(greatest(v_limit_n, 1), v_prefix_limit);
    IF p_op ? 'after' AND p_op->'after' <> 'null'::jsonb AND jsonb_typeof(p_op->'after') <> 'string' THEN
      PERFORM queen.fail_v1('kv_invalid_field', format('Operation %s: after must be a key (a string) or null.', p_index), p_index);
    END IF;
    RETURN v_out || jsonb_build_object('prefix', p_op->'prefix', 'limit', v_limit_n,
                                       'after', coalesce(p_op->'after', 'null'::jsonb));
  END IF;

  IF v_kind = 'get' THEN
    RETURN v_out;
  END IF;

  v_out := v_out || jsonb_build_object('required', coalesce(p_op->'required', 'false'::jsonb));

  -- Exactly one expiry on put, putIfAbsent and incr.
  IF v_kind IN ('put', 'incr') THEN
    v_ttl := p_op->'ttlSeconds';
    v_forever := p_op->'forever';
    IF v_forever IS NOT NULL AND jsonb_typeof(v_forever) NOT IN ('boolean', 'null') THEN
      PERFORM queen.fail_v1('kv_invalid_field', format('Operation %s: forever must be true when given.', p_index), p_index);
    END IF;
    v_has_ttl := v_ttl IS NOT NULL AND v_ttl <> 'null'::jsonb;
    -- coalesce: without it an absent forever makes this NULL, `false = NULL` is NULL, and a write
    -- with neither expiry would slip past the check below and be stored forever.
    v_is_forever := coalesce(v_forever = 'true'::jsonb, false);
    IF v_has_ttl = v_is_forever THEN
      PERFORM queen.fail_v1('kv_expiry_not_specified', format(
        'Operation %s (%s) needs exactly one of ttlSeconds (a whole number above zero) or forever: true; it has %s.',
        p_index, v_name, CASE WHEN v_has_ttl THEN 'both' ELSE 'neither' END), p_index);
    END IF;
    IF v_has_ttl THEN
      IF jsonb_typeof(v_ttl) <> 'number' OR v_ttl::numeric <> trunc(v_ttl::numeric)
         OR v_ttl::numeric <= 0 OR v_ttl::numeric > 3155760000 THEN
        PERFORM queen.fail_v1('kv_invalid_ttl', format(
          'Operation %s: ttlSeconds must be a whole number of seconds from 1 to 3155760000 (100 years), got %s.',
          p_index, queen.json_kind_v1(v_ttl)), p_index);
      END IF;
      v_out := v_out || jsonb_build_object('expiresAt', p_now + make_interval(secs => v_ttl::numeric::double precision));
    ELSE
      v_out := v_out || jsonb_build_object('expiresAt', NULL);
    END IF;
  END IF;

  -- expect: absent (unconditional), 0 (must not exist), N (optimistic lock). Present but null is a
  -- client bug, never a downgrade to an upsert: writing the word declares the intent to fence.
  IF p_op ? 'expect' THEN
    v_expect := p_op->'expect';
    IF v_name = 'putIfAbsent' THEN
      PERFORM queen.fail_v1('kv_expect_invalid', format(
        'Operation %s: putIfAbsent is put with expect: 0 and takes no expect of its own.', p_index), p_index);
    ELSIF v_kind = 'incr' THEN
      PERFORM queen.fail_v1('kv_expect_invalid', format(
        'Operation %s: incr has no expect, deliberately: it exists to remove the compare-and-set loop.', p_index), p_index);
    ELSIF jsonb_typeof(v_expect) IS DISTINCT FROM 'number' OR v_expect::numeric <> trunc(v_expect::numeric)
       OR v_expect::numeric < 0 OR v_expect::numeric > 9223372036854775807 THEN
      PERFORM queen.fail_v1('kv_expect_invalid', format(
        'Operation %s: expect must be 0 (must not exist) or a version; got %s. To write unconditionally, leave expect out.',
        p_index, queen.json_kind_v1(v_expect)), p_index);
    ELSIF v_kind = 'delete' AND v_expect::numeric = 0 THEN
      PERFORM queen.fail_v1('kv_expect_invalid', format(
        'Operation %s: a delete with expect: 0 could only delete nothing; give the version to fence on.', p_index), p_index);
    END IF;
    -- Normalised to an integer: JSON has one number type, so 12.0 is the version 12 (the check above
    -- accepts it as whole). Kept as sent, its text '12.0' would fail the ::bigint cast that runs
    -- the operation, and a valid fenced write would be refused as invalid_json.
    v_out := v_out || jsonb_build_object('expect', v_expect::numeric::bigint);
  ELSIF v_name = 'putIfAbsent' THEN
    v_out := v_out || jsonb_build_object('expect', 0);
  END IF;

  IF v_kind = 'put' THEN
    IF NOT p_op ? 'value' THEN
      PERFORM queen.fail_v1('kv_value_required', format(
        'Operation %s (%s) needs value; null is a legal value and must be written out.', p_index, v_name), p_index);
    END IF;
    IF octet_length((p_op->'value')::text) > 65536 THEN
      PERFORM queen.fail_v1('kv_value_too_large', format(
        'Operation %s: the value is %s bytes as stored; at most 65536 bytes are allowed.', p_index, octet_length((p_op->'value')::text)), p_index);
    END IF;
    RETURN v_out || jsonb_build_object('value', p_op->'value');
  END IF;

  IF v_kind = 'incr' THEN
    IF p_op ? 'value' THEN
      PERFORM queen.fail_v1('kv_invalid_field', format(
        'Operation %s: incr takes delta, not value; a missing or expired counter starts from 0.', p_index), p_index);
    END IF;
    IF p_op ? 'delta' AND jsonb_typeof(p_op->'delta') IS DISTINCT FROM 'number' THEN
      PERFORM queen.fail_v1('kv_invalid_delta', format('Operation %s: delta must be a number, got %s.', p_index, queen.json_kind_v1(p_op->'delta')), p_index);
    END IF;
    -- A delta wider than a value may be (9e131071 is 131,072 digits stored) would store an
    -- over-limit counter, or overflow numeric when added (22003, answered as invalid_json). With
    -- both operands within 65,536 bytes the sum cannot overflow; kv_incr_key_v1 checks its size.
    IF octet_length((p_op->'delta')::text) > 65536 THEN
      PERFORM queen.fail_v1('kv_value_too_large', format(
        'Operation %s: the delta is %s bytes as stored; a value, and so a counter, is at most 65536 bytes.',
        p_index, octet_length((p_op->'delta')::text)), p_index);
    END IF;
    v_min := nullif(p_op->'min', 'null'::jsonb);
    v_max := nullif(p_op->'max', 'null'::jsonb);
    IF (v_min IS NOT NULL AND jsonb_typeof(v_min) <> 'number') OR (v_max IS NOT NULL AND jsonb_typeof(v_max) <> 'number') THEN
      PERFORM queen.fail_v1('kv_invalid_limit_bounds', format('Operation %s: min and max must be numbers when given.', p_index), p_index);
    END IF;
    IF v_min IS NOT NULL AND v_max IS NOT NULL AND v_min::numeric > v_max::numeric THEN
      PERFORM queen.fail_v1('kv_invalid_limit_bounds', format('Operation %s: min is above max.', p_index), p_index);
    END IF;
    RETURN v_out || jsonb_build_object('delta', coalesce(p_op->'delta', '1'::jsonb), 'min', v_min, 'max', v_max);
  END IF;

  RETURN v_out; -- delete
END $$;

CREATE OR REPLACE FUNCTION queen.kv_check_key_v1(p_key JSONB, p_index INT) RETURNS VOID
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_key IS NULL OR p_key = 'null'::jsonb OR p_key = '""'::jsonb THEN
    PERFORM queen.fail_v1('kv_key_required', format('Operation %s needs key, 1 to 512 bytes of UTF-8.', p_index), p_index);
  END IF;
  IF jsonb_typeof(p_key) <> 'string' THEN
    PERFORM queen.fail_v1('kv_invalid_key', format('Operation %s: a key is a string, got %s.', p_index, queen.json_kind_v1(p_key)), p_index);
  END IF;
  IF octet_length(p_key #>> '{}') > 512 THEN
    PERFORM queen.fail_v1('kv_key_too_long', format(
      'Operation %s: the key is %s bytes of UTF-8; at most 512 are allowed.', p_index, octet_length(p_key #>> '{}')), p_index);
  END IF;
END $$;

-- The per-operation functions take the operation's fields as values, not as a jsonb object: the
-- general path (kv_apply_at_v1) reads them out of the normalised operation, the fast path
-- (kv_apply_fast_v1) passes what it already holds, and both reach the same statements. Each write
-- answers from its own RETURNING: one statement per outcome, no row variable to render afterwards.
-- Replaced by the functions below (same rules, fields as arguments).
DROP FUNCTION IF EXISTS queen.kv_put_v1(UUID, JSONB, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS queen.kv_delete_v1(UUID, JSONB, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS queen.kv_incr_v1(UUID, JSONB, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS queen.kv_get_v1(UUID, JSONB, TIMESTAMPTZ);
DROP FUNCTION IF EXISTS queen.kv_get_many_v1(UUID, JSONB, TIMESTAMPTZ);

-- The answer of a write that wrote nothing (a precondition lost, a delete of no row), from the row
-- there now: `p_live_reason` when that row is live, `absent` when there is none or it has expired.
-- LANGUAGE sql returning a set, so that it is inlined into the caller's statement (as
-- kv_get_key_v1 is). Shared by kv_put_key_v1's two conditional branches and kv_delete_key_v1.
CREATE OR REPLACE FUNCTION queen.kv_unapplied_answer_v1(
  p_tenant UUID, p_index INT, p_op TEXT, p_ns TEXT, p_key TEXT, p_live_reason TEXT, p_now TIMESTAMPTZ
) RETURNS SETOF JSONB LANGUAGE sql STABLE AS $$
  SELECT queen.kv_write_answer_v1(p_index, p_op, p_key, false,
           CASE WHEN kv.key IS NOT NULL AND queen.kv_live_v1(kv.expires_at, p_now) THEN p_live_reason ELSE 'absent' END, kv, p_now)
    FROM (SELECT) one LEFT JOIN queen.kv kv ON kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = p_key
$$;

-- put (unconditional, expect 0, expect N). Returns the write answer.
CREATE OR REPLACE FUNCTION queen.kv_put_key_v1(
  p_tenant UUID, p_index INT, p_op TEXT, p_ns TEXT, p_key TEXT, p_value JSONB, p_expires TIMESTAMPTZ,
  p_expect BIGINT, p_now TIMESTAMPTZ
) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_answer JSONB;
BEGIN
  IF p_expect IS NULL THEN
    -- Unconditional upsert: replaces the value AND the expiry (a put never inherits a TTL). Over an
    -- expired row it starts a new lineage.
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, p_ns, p_key, p_value, nextval('queen.kv_version_seq'), p_expires, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = EXCLUDED.value, version = EXCLUDED.version, expires_at = EXCLUDED.expires_at,
      updated_at = EXCLUDED.updated_at,
      created_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.created_at ELSE EXCLUDED.created_at END
    RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
    RETURN v_answer;
  END IF;

  IF p_expect = 0 THEN
    -- Must not exist: wins against an expired row still physically there, and resets created_at
    -- (a new lineage). ON CONFLICT locks the row even when the WHERE fails, so the SELECT below
    -- reads the winner we lost to.
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, p_ns, p_key, p_value, nextval('queen.kv_version_seq'), p_expires, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = EXCLUDED.value, version = EXCLUDED.version, expires_at = EXCLUDED.expires_at,
      created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at
    WHERE NOT queen.kv_live_v1(k.expires_at, p_now)
    RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
    IF NOT FOUND THEN
      SELECT a INTO v_answer FROM queen.kv_unapplied_answer_v1(p_tenant, p_index, p_op, p_ns, p_key, 'exists', p_now) a;
    END IF;
    RETURN v_answer;
  END IF;

  -- expect: N > 0 never creates a row: a conditional write that matches nothing writes nothing.
  UPDATE queen.kv AS k SET value = p_value, version = nextval('queen.kv_version_seq'),
         expires_at = p_expires, updated_at = p_now
   WHERE k.tenant_id = p_tenant AND k.namespace = p_ns AND k.key = p_key
     AND queen.kv_live_v1(k.expires_at, p_now) AND k.version = p_expect
  RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
  IF NOT FOUND THEN
    SELECT a INTO v_answer FROM queen.kv_unapplied_answer_v1(p_tenant, p_index, p_op, p_ns, p_key, 'version', p_now) a;
  END IF;
  RETURN v_answer;
END $$;

-- A batch of unconditional puts and nothing else (the bulk-load shape), as one set-based upsert in
-- the lock order instead of one statement per operation: the same upsert as kv_put_key_v1's first
-- branch (keep the two identical) and the same answers, in request order. Measured 2026-11-29,
-- 100 puts a call: backend CPU 6890 -> 4760 us a call (bench/kvProcedure.ts). Off with
-- queen.kv_fast_path = off; test/kv/fastPath.test.ts holds it to kv_put_key_v1's answers and rows.
CREATE OR REPLACE FUNCTION queen.kv_put_many_v1(p_tenant UUID, p_ops JSONB[], p_now TIMESTAMPTZ) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_answers JSONB;
BEGIN
  WITH o AS (
    SELECT (x->>'i')::int AS i, x->>'op' AS op, x->>'ns' AS ns, x->>'key' AS key, x->'value' AS value,
           (x->>'expiresAt')::timestamptz AS expires_at
      FROM unnest(p_ops) x
  ), w AS (
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    SELECT p_tenant, o.ns, o.key, o.value, nextval('queen.kv_version_seq'), o.expires_at, p_now, p_now
      FROM o ORDER BY o.ns COLLATE "C", o.key COLLATE "C"
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = EXCLUDED.value, version = EXCLUDED.version, expires_at = EXCLUDED.expires_at,
      updated_at = EXCLUDED.updated_at,
      created_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.created_at ELSE EXCLUDED.created_at END
    RETURNING k
  )
  SELECT jsonb_agg(queen.kv_write_answer_v1(o.i, o.op, o.key, true, NULL, w.k, p_now) ORDER BY o.i) INTO v_answers
    FROM o JOIN w ON (w.k).namespace = o.ns AND (w.k).key = o.key;
  RETURN v_answers;
END $$;

CREATE OR REPLACE FUNCTION queen.kv_delete_key_v1(
  p_tenant UUID, p_index INT, p_op TEXT, p_ns TEXT, p_key TEXT, p_expect BIGINT, p_now TIMESTAMPTZ
) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_answer JSONB;
BEGIN
  -- The answer after a delete shows no row; an expired row physically removed is, as far as
  -- anyone can tell, a delete of nothing.
  DELETE FROM queen.kv AS k
   WHERE k.tenant_id = p_tenant AND k.namespace = p_ns AND k.key = p_key
     AND (p_expect IS NULL OR (queen.kv_live_v1(k.expires_at, p_now) AND k.version = p_expect))
  RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, queen.kv_live_v1(k.expires_at, p_now),
              CASE WHEN NOT queen.kv_live_v1(k.expires_at, p_now) THEN 'absent' END, NULL::queen.kv, p_now)
    INTO v_answer;
  IF NOT FOUND THEN
    SELECT a INTO v_answer FROM queen.kv_unapplied_answer_v1(p_tenant, p_index, p_op, p_ns, p_key, 'version', p_now) a;
  END IF;
  RETURN v_answer;
END $$;

-- incr: lock the row (or create it), then decide with the whole picture. An expired row counts as
-- zero and starts a new window; a live row keeps the expiry it was born with (create-only TTL, or a
-- fixed-window limiter would never close under load); crossing min or max writes nothing.
-- Two shapes of the same rule. When a counter created from zero would be within the bounds (always,
-- without bounds) one upsert creates or updates it; ON CONFLICT locks the row even when its WHERE
-- refuses, so the SELECT after a refusal reads the row that refused. When creating would cross a
-- bound, only a live counter can move: an UPDATE, and after a refusal the row is locked and looked
-- at again, since a writer that committed in between may have made the update possible.
-- The value ceiling holds for a counter too: a sum can outgrow both operands (1e65000 + 1e-16383
-- is 81,000 digits), and a put of that value is 400 kv_value_too_large. Raising undoes the write
-- with the rest of the call. Returns the answer when the stored value fits.
CREATE OR REPLACE FUNCTION queen.kv_incr_size_ok_v1(p_answer JSONB, p_index INT) RETURNS JSONB
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF octet_length((p_answer->'value')::text) > 65536 THEN
    PERFORM queen.fail_v1('kv_value_too_large', format(
      'Operation %s: the counter would be %s bytes as stored; at most 65536 bytes are allowed. Nothing was written.',
      p_index, octet_length((p_answer->'value')::text)), p_index);
  END IF;
  RETURN p_answer;
END $$;

CREATE OR REPLACE FUNCTION queen.kv_incr_key_v1(
  p_tenant UUID, p_index INT, p_op TEXT, p_ns TEXT, p_key TEXT, p_delta NUMERIC, p_min NUMERIC, p_max NUMERIC,
  p_expires TIMESTAMPTZ, p_now TIMESTAMPTZ
) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_answer JSONB;
  v_retry BOOLEAN;
BEGIN
  IF (p_min IS NULL OR p_delta >= p_min) AND (p_max IS NULL OR p_delta <= p_max) THEN
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, p_ns, p_key, to_jsonb(0 + p_delta), nextval('queen.kv_version_seq'), p_expires, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = to_jsonb(CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.value::numeric ELSE 0 END + p_delta),
      version = EXCLUDED.version, updated_at = p_now,
      expires_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.expires_at ELSE EXCLUDED.expires_at END,
      created_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.created_at ELSE p_now END
    WHERE CASE WHEN NOT queen.kv_live_v1(k.expires_at, p_now) THEN true
               WHEN jsonb_typeof(k.value) <> 'number' THEN false
               ELSE (p_min IS NULL OR k.value::numeric + p_delta >= p_min) AND (p_max IS NULL OR k.value::numeric + p_delta <= p_max) END
    RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
    IF FOUND THEN
      RETURN queen.kv_incr_size_ok_v1(v_answer, p_index);
    END IF;
  END IF;
  LOOP
    UPDATE queen.kv AS k SET value = to_jsonb(k.value::numeric + p_delta), version = nextval('queen.kv_version_seq'), updated_at = p_now
     WHERE k.tenant_id = p_tenant AND k.namespace = p_ns AND k.key = p_key AND queen.kv_live_v1(k.expires_at, p_now)
       AND CASE WHEN jsonb_typeof(k.value) <> 'number' THEN false
                ELSE (p_min IS NULL OR k.value::numeric + p_delta >= p_min) AND (p_max IS NULL OR k.value::numeric + p_delta <= p_max) END
    RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
    IF FOUND THEN
      RETURN queen.kv_incr_size_ok_v1(v_answer, p_index);
    END IF;
    -- Refused: say why from the row as it is now, locked so it cannot change under the answer.
    SELECT queen.kv_write_answer_v1(p_index, p_op, p_key, false,
             CASE WHEN queen.kv_live_v1(kv.expires_at, p_now) AND jsonb_typeof(kv.value) <> 'number' THEN 'type' ELSE 'limit' END, kv, p_now),
           CASE WHEN queen.kv_live_v1(kv.expires_at, p_now) AND jsonb_typeof(kv.value) = 'number'
                THEN (p_min IS NULL OR kv.value::numeric + p_delta >= p_min) AND (p_max IS NULL OR kv.value::numeric + p_delta <= p_max)
                ELSE false END
      INTO v_answer, v_retry
      FROM queen.kv kv WHERE kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = p_key
      FOR UPDATE;
    IF NOT FOUND THEN
      RETURN queen.kv_write_answer_v1(p_index, p_op, p_key, false, 'limit', NULL::queen.kv, p_now);
    END IF;
    IF NOT v_retry THEN
      RETURN v_answer;
    END IF;
  END LOOP;
END $$;

-- A get's answer, found or not, from one statement. LANGUAGE sql returning a set so that it is
-- inlined into the statement that reads from it: the plan is the caller's, cached with it.
CREATE OR REPLACE FUNCTION queen.kv_get_key_v1(p_tenant UUID, p_index INT, p_ns TEXT, p_key TEXT, p_now TIMESTAMPTZ)
RETURNS SETOF JSONB LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    (SELECT jsonb_build_object('index', p_index, 'op', 'get', 'found', true) || queen.kv_row_json_v1(kv)
       FROM queen.kv kv
      WHERE kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = p_key AND queen.kv_live_v1(kv.expires_at, p_now)),
    jsonb_build_object('index', p_index, 'op', 'get', 'key', p_key, 'found', false))
$$;

-- Rows in byte order of key, and absence as a datum: `missing` is an explicit list. One pass over
-- the asked keys, each probed once. The answer is built as json (text) and cast once: jsonb_agg and
-- jsonb_build_object re-encode every row they take in (measured 2026-11-30, with the single pass:
-- about 200 -> 160 us a call of ten keys). Inlined into its caller like kv_get_key_v1 (a SQL
-- function that is not inlined is parsed and planned on every call: measured 2026-11-29,
-- PostgreSQL 17, 219 -> 45 us a call server-side). The keys are distinct: both paths refuse a
-- batch that names a key twice before anything runs.
CREATE OR REPLACE FUNCTION queen.kv_get_many_v1(p_tenant UUID, p_index INT, p_ns TEXT, p_keys JSONB, p_now TIMESTAMPTZ)
RETURNS SETOF JSONB LANGUAGE sql STABLE AS $$
  SELECT json_build_object(
    'index', p_index, 'op', 'getMany',
    'rows', coalesce(json_agg(queen.kv_row_json_v1(kv) ORDER BY a.key) FILTER (WHERE kv.key IS NOT NULL), '[]'),
    'missing', coalesce(json_agg(a.key ORDER BY a.key) FILTER (WHERE kv.key IS NULL), '[]'))::jsonb
    FROM (SELECT k COLLATE "C" AS key FROM jsonb_array_elements_text(p_keys) k) a
    LEFT JOIN queen.kv kv ON kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = a.key
                         AND queen.kv_live_v1(kv.expires_at, p_now)
$$;

-- A keyset page under a prefix, in byte order. Stops at `limit` rows or at the byte ceiling,
-- whichever comes first, and says so with truncated/nextAfter. Each page is its own snapshot.
-- The ceiling is the whole call's (kv-routes.md: "applied to the whole call"): kv_apply_at_v1
-- passes what is left of it in o->'budget' and reads back the bytes spent in '_bytes'. Only the
-- first page of a call may overshoot it by one row, so a single value above the ceiling still
-- makes progress; a later page with nothing left answers no rows, truncated, and its own cursor.
CREATE OR REPLACE FUNCTION queen.kv_get_prefix_v1(p_tenant UUID, o JSONB, p_now TIMESTAMPTZ) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_ns TEXT := o->>'ns';
  v_prefix TEXT := o->>'prefix';
  -- Past every key under the prefix. Without a successor (a run of U+10FFFF), 129 more U+10FFFF
  -- are 516 bytes, past any key of at most 512.
  v_upper TEXT := coalesce(queen.kv_prefix_upper_v1(o->>'prefix'), (o->>'prefix') || repeat(chr(1114111), 129));
  v_after TEXT := coalesce(o->>'after', '');
  v_limit INT := (o->>'limit')::int;
  v_call_max BIGINT := coalesce(nullif(current_setting('queen.kv_max_read_bytes', true), '')::bigint, 4194304);
  v_max_bytes BIGINT := coalesce((o->>'budget')::bigint, v_call_max);
  v_fresh BOOLEAN := v_max_bytes >= v_call_max;
  v_bytes BIGINT := 0;
  v_spent BIGINT := 0;
  v_rows JSONB[] := '{}';
  v_row JSONB;
  v_last TEXT;
  v_truncated BOOLEAN := false;
  r queen.kv;
BEGIN
  -- All three bounds are index conditions; the btree keeps the tighter lower one at run time, and
  -- the upper one keeps the scan inside the prefix.
  FOR r IN
    SELECT * FROM queen.kv kv
     WHERE kv.tenant_id = p_tenant AND kv.namespace = v_ns
       AND kv.key >= v_prefix AND kv.key > v_after AND kv.key < v_upper
       AND starts_with(kv.key, v_prefix) AND queen.kv_live_v1(kv.expires_at, p_now)
     ORDER BY kv.key
     LIMIT v_limit + 1
  LOOP
    IF cardinality(v_rows) = v_limit THEN
      v_truncated := true;
      EXIT;
    END IF;
    v_row := queen.kv_row_json_v1(r);
    v_bytes := v_bytes + octet_length(r.value::text) + octet_length(r.key);
    IF v_bytes > v_max_bytes AND (cardinality(v_rows) > 0 OR NOT v_fresh) THEN
      v_truncated := true;
      EXIT;
    END IF;
    v_rows := v_rows || v_row;
    v_last := r.key;
    v_spent := v_bytes;
  END LOOP;
  RETURN jsonb_build_object('index', (o->>'i')::int, 'op', 'getPrefix', 'rows', to_jsonb(v_rows),
                            'truncated', v_truncated,
                            -- Truncated always carries a string cursor, even with no rows ('' = from
                            -- the start), so a client that pages while nextAfter is set never stops early.
                            'nextAfter', CASE WHEN v_truncated THEN coalesce(v_last, o->>'after', '') END,
                            '_bytes', v_spent);
END $$;

-- The fast paths' test of a write's expiry: exactly one of forever: true or a whole ttlSeconds from 1
-- to 3155760000. A subset of kv_check_op_v1's rule (which also says why when it is not); NULL or
-- false means "not plainly valid": the general path decides. One SQL expression, inlined.
CREATE OR REPLACE FUNCTION queen.kv_plain_expiry_v1(p_op JSONB) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_op ? 'forever' THEN p_op->'forever' = 'true'::jsonb AND NOT p_op ? 'ttlSeconds'
              ELSE jsonb_typeof(p_op->'ttlSeconds') = 'number' AND (p_op->>'ttlSeconds')::numeric = trunc((p_op->>'ttlSeconds')::numeric)
                   AND (p_op->>'ttlSeconds')::numeric > 0 AND (p_op->>'ttlSeconds')::numeric <= 3155760000 END
$$;

-- The fast check, for batches of several operations (one operation alone takes kv_apply_fast_v1,
-- below): a get, put or putIfAbsent whose shape is plainly valid is normalised here into exactly
-- what kv_check_op_v1 would return for it, with a handful of expressions instead of about forty
-- (why that pays: see kv_apply_fast_v1). Returns NULL for anything else and kv_check_op_v1 then
-- decides, refusals included, so every refusal keeps exactly one definition. The guard must stay a
-- subset of what kv_check_op_v1 accepts; test/kv/fastPath.test.ts holds both paths to the same
-- answers (SET queen.kv_fast_path = off turns this one off).
CREATE OR REPLACE FUNCTION queen.kv_fast_check_op_v1(p_op JSONB, p_index INT, p_now TIMESTAMPTZ) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_name TEXT := CASE WHEN jsonb_typeof(p_op) = 'object' AND current_setting('queen.kv_fast_path', true) IS DISTINCT FROM 'off'
                      AND jsonb_typeof(p_op->'ns') = 'string' AND queen.name_ok_v1(p_op->>'ns')
                      AND jsonb_typeof(p_op->'key') = 'string' AND (p_op->>'key') <> '' AND octet_length(p_op->>'key') <= 512
                 THEN p_op->>'op' END;
BEGIN
  -- Not a candidate (not an object, or an odd ns/key): the general path says why. Returning here
  -- matters: `NULL AND x` still evaluates x, and `p_op - text[]` raises on a scalar.
  IF v_name IS NULL THEN
    RETURN NULL;
  END IF;
  IF v_name = 'get' AND (p_op - '{op,ns,key}'::text[]) = '{}'::jsonb THEN
    RETURN jsonb_build_object('i', p_index, 'op', 'get', 'kind', 'get', 'ns', p_op->'ns', 'key', p_op->'key');
  END IF;
  IF v_name IN ('put', 'putIfAbsent') AND (p_op - '{op,ns,key,value,forever,ttlSeconds}'::text[]) = '{}'::jsonb
     AND p_op ? 'value' AND octet_length((p_op->'value')::text) <= 65536
     AND queen.kv_plain_expiry_v1(p_op) THEN
    RETURN jsonb_build_object(
      'i', p_index, 'op', v_name, 'kind', 'put', 'ns', p_op->'ns', 'key', p_op->'key', 'required', false,
      'expiresAt', CASE WHEN p_op ? 'ttlSeconds' THEN p_now + make_interval(secs => (p_op->>'ttlSeconds')::numeric::double precision) END,
      'value', p_op->'value') || CASE WHEN v_name = 'putIfAbsent' THEN '{"expect": 0}'::jsonb ELSE '{}'::jsonb END;
  END IF;
  RETURN NULL;
END $$;

-- The fast path: one operation whose shape is plainly valid, given as values (name, namespace and
-- key as text, every other field in p_rest; p_whole: p_rest is the whole operation as sent, whose
-- op, ns and key fields are the ones given), answered by the same per-operation function the
-- general path calls, without normalising it into jsonb and reading it back, without the sort and
-- the duplicate check a single operation cannot need. Why it pays: plpgsql builds the executor
-- state of every expression it evaluates once per transaction, and a KV call is usually a
-- transaction of its own, so on the hot path the cost is the number of distinct expressions and
-- nested calls evaluated, not their work (perf on the backend, 2026-11-29: ExecInitExpr*, fmgr_info
-- and catalog-cache lookups were the top symbols).
-- Returns NULL for anything else (an unknown field, `required`, `expect`, a field of the wrong type,
-- both or neither expiry, ...) and kv_check_op_v1 then decides, refusals included, so every refusal
-- keeps exactly one definition. The guard must stay a subset of what kv_check_op_v1 accepts;
-- test/kv/fastPath.test.ts holds both paths to the same answers (SET queen.kv_fast_path = off
-- turns this off). The namespace test is queen.name_ok_v1, the one definition of a name.
CREATE OR REPLACE FUNCTION queen.kv_apply_fast_v1(
  p_tenant UUID, p_op TEXT, p_ns TEXT, p_key TEXT, p_rest JSONB, p_now TIMESTAMPTZ, p_whole BOOLEAN
) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_answer JSONB;
BEGIN
  IF NOT coalesce(queen.name_ok_v1(p_ns), false)
     OR jsonb_typeof(p_rest) IS DISTINCT FROM 'object'
     OR current_setting('queen.kv_fast_path', true) IS NOT DISTINCT FROM 'off' THEN
    RETURN NULL;
  END IF;
  IF p_whole THEN
    p_rest := p_rest - '{op,ns,key}'::text[];
  END IF;
  IF p_op = 'getMany' THEN
    -- The keys: 1 to kv_max_batch distinct non-empty strings of at most 512 bytes.
    IF p_key IS NULL AND jsonb_typeof(p_rest->'keys') = 'array' AND (p_rest - 'keys') = '{}'::jsonb THEN
      SELECT a INTO v_answer FROM queen.kv_get_many_v1(p_tenant, 0, p_ns, p_rest->'keys', p_now) a
       WHERE (SELECT count(*) BETWEEN 1 AND coalesce(nullif(current_setting('queen.kv_max_batch', true), '')::int, 1000)
                     AND bool_and(jsonb_typeof(k) = 'string' AND k <> '""'::jsonb AND octet_length(k #>> '{}') <= 512)
                     AND count(DISTINCT k) = count(*)
                FROM jsonb_array_elements(p_rest->'keys') k);
    END IF;
    RETURN v_answer;
  END IF;
  IF p_key IS NULL OR p_key = '' OR octet_length(p_key) > 512 THEN
    RETURN NULL;
  END IF;
  IF p_op = 'get' THEN
    IF p_rest = '{}'::jsonb THEN
      SELECT a INTO v_answer FROM queen.kv_get_key_v1(p_tenant, 0, p_ns, p_key, p_now) a;
    END IF;
    RETURN v_answer;
  END IF;
  IF p_op = 'delete' THEN
    RETURN CASE WHEN p_rest = '{}'::jsonb THEN queen.kv_delete_key_v1(p_tenant, 0, p_op, p_ns, p_key, NULL, p_now) END;
  END IF;
  -- put, putIfAbsent and incr: exactly one expiry, valid.
  IF queen.kv_plain_expiry_v1(p_rest) IS NOT TRUE THEN
    RETURN NULL;
  END IF;
  IF p_op IN ('put', 'putIfAbsent') THEN
    RETURN CASE WHEN (p_rest - '{value,forever,ttlSeconds}'::text[]) = '{}'::jsonb AND p_rest ? 'value'
                     AND octet_length((p_rest->'value')::text) <= 65536
                THEN queen.kv_put_key_v1(p_tenant, 0, p_op, p_ns, p_key, p_rest->'value',
                       p_now + make_interval(secs => (p_rest->>'ttlSeconds')::numeric::double precision),
                       CASE WHEN p_op = 'putIfAbsent' THEN 0 END, p_now) END;
  END IF;
  IF p_op = 'incr' THEN
    RETURN CASE WHEN (p_rest - '{delta,min,max,forever,ttlSeconds}'::text[]) = '{}'::jsonb
                     AND coalesce(jsonb_typeof(p_rest->'delta'), 'number') = 'number'
                     AND octet_length(coalesce(p_rest->'delta', '1'::jsonb)::text) <= 65536
                     AND coalesce(jsonb_typeof(p_rest->'min'), 'null') IN ('number', 'null')
                     AND coalesce(jsonb_typeof(p_rest->'max'), 'null') IN ('number', 'null')
                     AND NOT coalesce((p_rest->>'min')::numeric > (p_rest->>'max')::numeric, false)
                THEN queen.kv_incr_key_v1(p_tenant, 0, p_op, p_ns, p_key, coalesce((p_rest->>'delta')::numeric, 1),
                       (p_rest->>'min')::numeric, (p_rest->>'max')::numeric,
                       p_now + make_interval(secs => (p_rest->>'ttlSeconds')::numeric::double precision), p_now) END;
  END IF;
  RETURN NULL;
END $$;

-- Runs a validated, normalised batch (kv_check_op_v1's output) and answers in request order. A
-- lost `required` raises QK409 with the verdict as its DETAIL, for kv_apply_at_v1 to catch: call
-- it from there only, or the verdict, value included, is an error the server logs.
CREATE OR REPLACE FUNCTION queen.kv_run_v1(p_tenant UUID, p_norm JSONB[], p_now TIMESTAMPTZ) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_n INT := cardinality(p_norm);
  v_norm JSONB[] := p_norm;
  v_results JSONB[];
  v_op JSONB;
  v_answer JSONB;
  v_fail JSONB;
  v_read_budget BIGINT := coalesce(nullif(current_setting('queen.kv_max_read_bytes', true), '')::bigint, 4194304);
BEGIN
  v_results := array_fill(NULL::jsonb, ARRAY[v_n]);
  -- Single-key operations in ascending (namespace, key) byte order: the lock order. Then the
  -- multi-key reads, which lock nothing.
  -- A single operation has no order to sort: skipping the query saves a statement per call.
  IF v_n > 1 THEN
    SELECT array_agg(o ORDER BY (o ? 'key') DESC, (o->>'ns') COLLATE "C", (o->>'key') COLLATE "C", (o->>'i')::int)
      INTO v_norm FROM unnest(v_norm) o;
  END IF;
  FOREACH v_op IN ARRAY v_norm
  LOOP
    CASE v_op->>'kind'
      WHEN 'get' THEN
        SELECT a INTO v_answer FROM queen.kv_get_key_v1(p_tenant, (v_op->>'i')::int, v_op->>'ns', v_op->>'key', p_now) a;
      WHEN 'getMany' THEN
        SELECT a INTO v_answer FROM queen.kv_get_many_v1(p_tenant, (v_op->>'i')::int, v_op->>'ns', v_op->'keys', p_now) a;
      WHEN 'getPrefix' THEN
        v_answer := queen.kv_get_prefix_v1(p_tenant, v_op || jsonb_build_object('budget', v_read_budget), p_now);
      WHEN 'put' THEN
        v_answer := queen.kv_put_key_v1(p_tenant, (v_op->>'i')::int, v_op->>'op', v_op->>'ns', v_op->>'key', v_op->'value',
                                        (v_op->>'expiresAt')::timestamptz, (v_op->>'expect')::bigint, p_now);
      WHEN 'delete' THEN
        v_answer := queen.kv_delete_key_v1(p_tenant, (v_op->>'i')::int, v_op->>'op', v_op->>'ns', v_op->>'key',
                                           (v_op->>'expect')::bigint, p_now);
      WHEN 'incr' THEN
        v_answer := queen.kv_incr_key_v1(p_tenant, (v_op->>'i')::int, v_op->>'op', v_op->>'ns', v_op->>'key',
                                         (v_op->>'delta')::numeric, (v_op->>'min')::numeric, (v_op->>'max')::numeric,
                                         (v_op->>'expiresAt')::timestamptz, p_now);
    END CASE;
    IF v_op->>'kind' = 'getPrefix' THEN
      v_read_budget := v_read_budget - (v_answer->>'_bytes')::bigint;
      v_answer := v_answer - '_bytes';
    END IF;
    v_results[(v_op->>'i')::int + 1] := v_answer;
    IF (v_op->>'required')::boolean AND NOT (v_answer->>'applied')::boolean
       AND (v_fail IS NULL OR (v_answer->>'index')::int < (v_fail->>'index')::int) THEN
      v_fail := v_answer;
    END IF;
  END LOOP;

  IF v_fail IS NOT NULL THEN
    -- Caught by kv_apply_at_v1, the only caller, which rolls the writes back and answers this.
    RAISE EXCEPTION USING ERRCODE = 'QK409', MESSAGE = 'kv_precondition',
      DETAIL = jsonb_build_object('ok', false, 'success', false, 'reason', 'kv_precondition',
                                  'failedIndex', v_fail->'index', 'kvReason', v_fail->'reason',
                                  'version', v_fail->'version', 'value', v_fail->'value')::text;
  END IF;
  IF array_position(v_results, NULL) IS NOT NULL OR cardinality(v_results) <> v_n THEN
    RAISE EXCEPTION 'kv_apply_v1 produced % answers for % operations', cardinality(v_results) - coalesce(array_position(v_results, NULL), 0), v_n;
  END IF;
  RETURN to_jsonb(v_results);
END $$;

-- The procedure behind every route, at a chosen instant (tests pick `p_now` to test expiry
-- without sleeping; kv_apply_v1 below passes the clock).
CREATE OR REPLACE FUNCTION queen.kv_apply_at_v1(
  p_tenant UUID, p_ops JSONB, p_in_transaction BOOLEAN, p_now TIMESTAMPTZ
) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_max_batch INT;
  v_n INT;
  v_norm JSONB[] := '{}';
  v_op JSONB;
  v_answer JSONB;
  v_dup INT;
  v_prefix_dup INT;
  v_has_prefix BOOLEAN := false;
  v_required BOOLEAN := false;
  v_verdict TEXT;
  i INT;
BEGIN
  -- One plainly valid operation: nothing to sort, no duplicate to find, no precondition to lose.
  IF jsonb_typeof(p_ops) = 'array' AND jsonb_array_length(p_ops) = 1 AND jsonb_typeof(p_ops->0) = 'object' THEN
    v_op := p_ops->0;
    v_answer := queen.kv_apply_fast_v1(p_tenant,
      CASE WHEN jsonb_typeof(v_op->'op') = 'string' THEN v_op->>'op' END,
      CASE WHEN jsonb_typeof(v_op->'ns') = 'string' THEN v_op->>'ns' END,
      -- '' for a key that is there but not a string: no fast path takes it.
      CASE WHEN jsonb_typeof(v_op->'key') = 'string' THEN v_op->>'key' WHEN v_op ? 'key' THEN '' END,
      v_op, p_now, true);
    IF v_answer IS NOT NULL THEN
      RETURN jsonb_build_array(v_answer);
    END IF;
  END IF;
  v_max_batch := coalesce(nullif(current_setting('queen.kv_max_batch', true), '')::int, 1000);
  IF p_ops IS NULL OR jsonb_typeof(p_ops) <> 'array' OR jsonb_array_length(p_ops) = 0 THEN
    PERFORM queen.fail_v1('kv_operations_required', 'operations must be a non-empty array of KV operations.', NULL);
  END IF;
  v_n := jsonb_array_length(p_ops);
  IF v_n > v_max_batch THEN
    PERFORM queen.fail_v1('kv_batch_too_large', format('The batch has %s operations; at most %s are allowed.', v_n, v_max_batch), NULL);
  END IF;

  FOR i IN 0 .. v_n - 1 LOOP
    v_op := p_ops->i;
    v_norm := v_norm || coalesce(queen.kv_fast_check_op_v1(v_op, i, p_now), queen.kv_check_op_v1(v_op, i, p_in_transaction, p_now));
    v_has_prefix := v_has_prefix OR v_norm[i + 1]->>'kind' = 'getPrefix';
    v_required := v_required OR coalesce((v_norm[i + 1]->>'required')::boolean, false);
  END LOOP;

  -- A batch touches a key at most once, so there is no intra-batch order to reason about.
  IF v_n > 1 OR v_norm[1] ? 'keys' THEN
    SELECT t.idx INTO v_dup FROM (
      SELECT idx, row_number() OVER (PARTITION BY ns, key ORDER BY idx) AS nth FROM (
        SELECT (o->>'i')::int AS idx, o->>'ns' AS ns, o->>'key' AS key FROM unnest(v_norm) o WHERE o ? 'key'
        UNION ALL
        SELECT (o->>'i')::int, o->>'ns', k FROM unnest(v_norm) o, jsonb_array_elements_text(o->'keys') k WHERE o ? 'keys'
      ) touched
    ) t WHERE t.nth > 1 ORDER BY t.idx LIMIT 1;
    -- A getPrefix touches every key of its range too. The reads of a prefix run after the batch's
    -- single-key operations (the lock order), so a getPrefix at index 0 answered with what a put at
    -- index 1 wrote: an intra-batch order after all. A write in the range [prefix, ...) past
    -- `after` is refused; reads beside it (a get or getMany of a key in the range) have no order
    -- between them and stay allowed.
    IF v_has_prefix THEN
      SELECT greatest(p.idx, t.idx) INTO v_prefix_dup FROM (
        SELECT (o->>'i')::int AS idx, o->>'ns' AS ns, o->>'prefix' AS prefix, o->>'after' AS after
          FROM unnest(v_norm) o WHERE o->>'kind' = 'getPrefix'
      ) p JOIN (
        SELECT (o->>'i')::int AS idx, o->>'ns' AS ns, o->>'key' AS key FROM unnest(v_norm) o
         WHERE o->>'kind' IN ('put', 'delete', 'incr')
      ) t ON t.ns = p.ns AND starts_with(t.key, p.prefix) AND (p.after IS NULL OR t.key COLLATE "C" > p.after COLLATE "C")
      ORDER BY 1 LIMIT 1;
      v_dup := least(v_dup, v_prefix_dup);
    END IF;
    IF v_dup IS NOT NULL THEN
      PERFORM queen.fail_v1('kv_duplicate_key', format(
        'Operation %s touches a key that an earlier operation of this batch already touches; a batch touches a key at most once.', v_dup), v_dup);
    END IF;
  END IF;

  -- Unconditional puts only: one set-based upsert (kv_put_many_v1) answers them all.
  IF v_n > 1 AND current_setting('queen.kv_fast_path', true) IS DISTINCT FROM 'off'
     AND NOT v_required AND NOT EXISTS (SELECT 1 FROM unnest(v_norm) o WHERE o->>'kind' <> 'put' OR o ? 'expect') THEN
    RETURN queen.kv_put_many_v1(p_tenant, v_norm, p_now);
  END IF;

  IF NOT v_required THEN
    RETURN queen.kv_run_v1(p_tenant, v_norm, p_now);
  END IF;
  -- A sub-block with a handler is a subtransaction: a lost `required` raises inside it
  -- (kv_run_v1), the handler undoes every write the call made and answers the verdict. An error
  -- caught here is never reported to the server's log. Only batches with a `required` pay for it.
  BEGIN
    RETURN queen.kv_run_v1(p_tenant, v_norm, p_now);
  EXCEPTION WHEN SQLSTATE 'QK409' THEN
    GET STACKED DIAGNOSTICS v_verdict = PG_EXCEPTION_DETAIL;
    RETURN v_verdict::jsonb;
  END;
END $$;

-- The entry point. A batch of one operation tries the fast path here, in SQL the planner inlines
-- into the caller's statement (a named statement: planned once per connection), which spares the
-- call of the plpgsql kv_apply_at_v1 and its set-up (measured 2026-11-30: about 25 us a call).
-- Only functions that cannot fail on any jsonb may appear in the arguments: with the statement's
-- parameters as constants, the planner evaluates them while planning, CASE or not. A declined fast
-- path has done nothing, so the general path's own clock reading is its one instant.
-- Answers the array of answers, or the verdict object of a lost `required` (see the header).
CREATE OR REPLACE FUNCTION queen.kv_apply_v1(p_tenant UUID, p_ops JSONB, p_in_transaction BOOLEAN DEFAULT false)
RETURNS JSONB LANGUAGE sql AS $$
  SELECT coalesce(
    CASE WHEN jsonb_typeof(p_ops) = 'array' AND p_ops->1 IS NULL THEN
      nullif(jsonb_build_array(queen.kv_apply_fast_v1(p_tenant,
        CASE WHEN jsonb_typeof(p_ops->0->'op') = 'string' THEN p_ops->0->>'op' END,
        CASE WHEN jsonb_typeof(p_ops->0->'ns') = 'string' THEN p_ops->0->>'ns' END,
        CASE WHEN jsonb_typeof(p_ops->0->'key') = 'string' THEN p_ops->0->>'key' WHEN p_ops->0 ? 'key' THEN '' END,
        p_ops->0, clock_timestamp(), true)), '[null]'::jsonb) END,
    queen.kv_apply_at_v1(p_tenant, p_ops, p_in_transaction, clock_timestamp()))
$$;

-- The path routes' entry (GET/PUT/DELETE /api/v1/kv/:ns/*key): the operation the path names with
-- the body's fields. The fast path answers it when it can; otherwise it is the one-operation batch
-- kv_apply_v1 always ran for these routes. A declined fast path has done nothing, so the second
-- clock reading the general path takes is its one instant. kv_apply_at_v1 rather than kv_apply_v1:
-- this body is inlined into the route's statement, and every expression in it, taken or not, is
-- set up on every execution. The general path answers an array of one answer, or the verdict
-- object of a lost `required`: '[]' || x is x for the array and [x] for the object, so `-> 0` is
-- the one answer either way, with kv_apply_at_v1 named once.
CREATE OR REPLACE FUNCTION queen.kv_apply_one_v1(p_tenant UUID, p_op TEXT, p_ns TEXT, p_key TEXT, p_body JSONB)
RETURNS JSONB LANGUAGE sql AS $$
  SELECT coalesce(queen.kv_apply_fast_v1(p_tenant, p_op, p_ns, p_key, p_body, clock_timestamp(), false),
                  ('[]'::jsonb || queen.kv_apply_at_v1(p_tenant, jsonb_build_array(jsonb_build_object('op', p_op, 'ns', p_ns, 'key', p_key) || p_body),
                                                       false, clock_timestamp())) -> 0)
$$;
