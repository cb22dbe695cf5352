-- The KV checks: what a KV operation may be, and its refusals (kv_check_op_v1, the one
-- definition, which the general path runs), and the tests the fast paths run instead (the last
-- functions here): each is a subset of that rule, true only of what it accepts, and not true of
-- anything else, which then takes the general path and its refusal. The bounds are queen.limit_v1's (queen.sql).

-- What kind of JSON a field holds, for a refusal's sentence: a refusal says this, never the JSON
-- itself (kv_apply.sql's header says why: PostgreSQL logs every refusal's message).
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
  v_prefix_limit INT := queen.limit_v1('kv_prefix_limit');
  v_max_batch INT := queen.limit_v1('kv_max_batch');
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
    IF octet_length(p_op->>'prefix') > queen.kv_max_key_bytes_v1() THEN
      PERFORM queen.fail_v1('kv_key_too_long', format('Operation %s: the prefix is longer than %s bytes, the longest key.',
        p_index, queen.kv_max_key_bytes_v1()), p_index);
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
         OR v_ttl::numeric <= 0 OR v_ttl::numeric > queen.kv_max_ttl_seconds_v1() THEN
        PERFORM queen.fail_v1('kv_invalid_ttl', format(
          'Operation %s: ttlSeconds must be a whole number of seconds from 1 to %s (100 years), got %s.',
          p_index, queen.kv_max_ttl_seconds_v1(), queen.json_kind_v1(v_ttl)), p_index);
      END IF;
      v_out := v_out || jsonb_build_object('expiresAt', queen.kv_expires_at_v1(v_ttl, p_now));
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
    IF NOT queen.kv_value_ok_v1(p_op->'value') THEN
      PERFORM queen.fail_v1('kv_value_too_large', format('Operation %s: the value is %s bytes as stored; at most %s bytes are allowed.',
        p_index, octet_length((p_op->'value')::text), queen.kv_max_value_bytes_v1()), p_index);
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
    IF NOT queen.kv_value_ok_v1(p_op->'delta') THEN
      PERFORM queen.fail_v1('kv_value_too_large', format(
        'Operation %s: the delta is %s bytes as stored; a value, and so a counter, is at most %s bytes.',
        p_index, octet_length((p_op->'delta')::text), queen.kv_max_value_bytes_v1()), p_index);
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
    PERFORM queen.fail_v1('kv_key_required', format('Operation %s needs key, 1 to %s bytes of UTF-8.', p_index, queen.kv_max_key_bytes_v1()), p_index);
  END IF;
  IF jsonb_typeof(p_key) <> 'string' THEN
    PERFORM queen.fail_v1('kv_invalid_key', format('Operation %s: a key is a string, got %s.', p_index, queen.json_kind_v1(p_key)), p_index);
  END IF;
  IF NOT queen.kv_key_ok_v1(p_key #>> '{}') THEN
    PERFORM queen.fail_v1('kv_key_too_long', format('Operation %s: the key is %s bytes of UTF-8; at most %s are allowed.',
      p_index, octet_length(p_key #>> '{}'), queen.kv_max_key_bytes_v1()), p_index);
  END IF;
END $$;

-- The fast paths' tests. Each is one SQL expression, inlined where it is called, and a subset of
-- kv_check_op_v1's rule for the same field: true only of what that rule accepts; NULL or false
-- means "not plainly valid", and the general path decides and says why.
-- On (the default) unless the session says SET queen.kv_fast_path = off: test/kv/fastPath.test.ts
-- runs every case both ways and holds the two paths to the same answers.
CREATE OR REPLACE FUNCTION queen.kv_fast_path_v1() RETURNS BOOLEAN
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT current_setting('queen.kv_fast_path', true) IS DISTINCT FROM 'off'
$$;

-- A key: a non-empty string within the bound.
CREATE OR REPLACE FUNCTION queen.kv_key_ok_v1(p_key TEXT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_key <> '' AND octet_length(p_key) <= queen.kv_max_key_bytes_v1()
$$;

-- A value (or a delta) within the bound, as stored.
CREATE OR REPLACE FUNCTION queen.kv_value_ok_v1(p_value JSONB) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT octet_length(p_value::text) <= queen.kv_max_value_bytes_v1()
$$;

-- A write's expiry from its ttlSeconds (a number the checks accepted); NULL, forever, without one.
CREATE OR REPLACE FUNCTION queen.kv_expires_at_v1(p_ttl JSONB, p_now TIMESTAMPTZ) RETURNS TIMESTAMPTZ
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT p_now + make_interval(secs => (p_ttl #>> '{}')::numeric::double precision)
$$;

-- A write's expiry: exactly one of forever: true or a whole ttlSeconds from 1 to the bound.
CREATE OR REPLACE FUNCTION queen.kv_plain_expiry_v1(p_op JSONB) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_op ? 'forever' THEN p_op->'forever' = 'true'::jsonb AND NOT p_op ? 'ttlSeconds'
              ELSE jsonb_typeof(p_op->'ttlSeconds') = 'number' AND (p_op->>'ttlSeconds')::numeric = trunc((p_op->>'ttlSeconds')::numeric)
                   AND (p_op->>'ttlSeconds')::numeric > 0 AND (p_op->>'ttlSeconds')::numeric <= queen.kv_max_ttl_seconds_v1() END
$$;

-- A put or putIfAbsent (p_op, an object; p_given: its fields already tested, none or op, ns and
-- key), and an incr (p_rest: its fields other than op, ns and key), plainly valid, without
-- `required` or `expect`. (A get or delete plainly valid has no other field: p_rest = '{}'.) One
-- function per operation, not one for all: the fast paths pay for the size of every expression
-- they evaluate, taken branches or not; and p_given spares the batch check a second copy of the
-- operation without op, ns and key. AND stops at a false but not at a NULL, so no term may raise
-- on what an earlier one let through.
CREATE OR REPLACE FUNCTION queen.kv_plain_put_v1(p_op JSONB, p_given TEXT[]) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT (p_op - (p_given || '{value,forever,ttlSeconds}'::text[])) = '{}'::jsonb
         AND p_op ? 'value' AND queen.kv_value_ok_v1(p_op->'value') AND queen.kv_plain_expiry_v1(p_op)
$$;
CREATE OR REPLACE FUNCTION queen.kv_plain_incr_v1(p_rest JSONB) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT queen.kv_plain_expiry_v1(p_rest) AND (p_rest - '{delta,min,max,forever,ttlSeconds}'::text[]) = '{}'::jsonb
         AND coalesce(jsonb_typeof(p_rest->'delta'), 'number') = 'number'
         AND queen.kv_value_ok_v1(coalesce(p_rest->'delta', '1'::jsonb))
         AND coalesce(jsonb_typeof(p_rest->'min'), 'null') IN ('number', 'null')
         AND coalesce(jsonb_typeof(p_rest->'max'), 'null') IN ('number', 'null')
         AND NOT coalesce((p_rest->>'min')::numeric > (p_rest->>'max')::numeric, false)
$$;

-- The fast check, for batches of several operations (one operation alone takes kv_apply_fast_v1,
-- in kv_apply.sql): a get, put or putIfAbsent that passes the guard is normalised here into
-- exactly what kv_check_op_v1 would return for it, with a handful of expressions instead of about
-- forty (why that pays: see kv_apply_fast_v1). Returns NULL for anything else, and kv_check_op_v1
-- then decides, refusals included, so every refusal keeps exactly one definition.
CREATE OR REPLACE FUNCTION queen.kv_fast_check_op_v1(p_op JSONB, p_index INT, p_now TIMESTAMPTZ) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_name TEXT := CASE WHEN jsonb_typeof(p_op) = 'object' AND queen.kv_fast_path_v1()
                      AND jsonb_typeof(p_op->'ns') = 'string' AND queen.name_ok_v1(p_op->>'ns')
                      AND jsonb_typeof(p_op->'key') = 'string' AND queen.kv_key_ok_v1(p_op->>'key')
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
  IF v_name IN ('put', 'putIfAbsent') AND queen.kv_plain_put_v1(p_op, '{op,ns,key}') THEN
    RETURN jsonb_build_object(
      'i', p_index, 'op', v_name, 'kind', 'put', 'ns', p_op->'ns', 'key', p_op->'key', 'required', false,
      'expiresAt', queen.kv_expires_at_v1(p_op->'ttlSeconds', p_now),
      'value', p_op->'value') || CASE WHEN v_name = 'putIfAbsent' THEN '{"expect": 0}'::jsonb ELSE '{}'::jsonb END;
  END IF;
  RETURN NULL;
END $$;
