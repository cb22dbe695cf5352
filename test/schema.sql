-- tables
TABLE kv fillfactor=70,vacuum_truncate=off
TABLE kv_quota
TABLE kv_usage
TABLE system_state

-- columns
COLUMN kv.tenant_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001'::uuid
COLUMN kv.namespace text COLLATE "C" NOT NULL
COLUMN kv.key text COLLATE "C" NOT NULL
COLUMN kv.value jsonb NOT NULL
COLUMN kv.version bigint NOT NULL
COLUMN kv.expires_at timestamp with time zone
COLUMN kv.shard smallint NOT NULL GENERATED  DEFAULT ((hashtextextended(key, (0)::bigint) & (63)::bigint))::smallint
COLUMN kv.created_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN kv.updated_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN kv_quota.tenant_id uuid NOT NULL
COLUMN kv_quota.granted boolean NOT NULL DEFAULT true
COLUMN kv_quota.enabled boolean NOT NULL DEFAULT true
COLUMN kv_quota.max_rows bigint
COLUMN kv_quota.max_bytes bigint
COLUMN kv_quota.max_timers bigint
COLUMN kv_quota.updated_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN kv_usage.tenant_id uuid NOT NULL
COLUMN kv_usage.rows bigint NOT NULL DEFAULT 0
COLUMN kv_usage.bytes bigint NOT NULL DEFAULT 0
COLUMN kv_usage.timers bigint NOT NULL DEFAULT 0
COLUMN kv_usage.timer_bytes bigint NOT NULL DEFAULT 0
COLUMN kv_usage.computed_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN system_state.key text NOT NULL
COLUMN system_state.value jsonb NOT NULL
COLUMN system_state.updated_at timestamp with time zone NOT NULL DEFAULT now()

-- constraints
CONSTRAINT kv.kv_pkey PRIMARY KEY (tenant_id, namespace, key)
CONSTRAINT kv_quota.kv_quota_pkey PRIMARY KEY (tenant_id)
CONSTRAINT kv_usage.kv_usage_pkey PRIMARY KEY (tenant_id)
CONSTRAINT system_state.system_state_pkey PRIMARY KEY (key)

-- indexes
CREATE INDEX idx_kv_shard_expires ON queen.kv USING btree (shard, expires_at) WHERE (expires_at IS NOT NULL)
CREATE UNIQUE INDEX kv_pkey ON queen.kv USING btree (tenant_id, namespace, key)
CREATE UNIQUE INDEX kv_quota_pkey ON queen.kv_quota USING btree (tenant_id)
CREATE UNIQUE INDEX kv_usage_pkey ON queen.kv_usage USING btree (tenant_id)
CREATE UNIQUE INDEX system_state_pkey ON queen.system_state USING btree (key)

-- sequences
SEQUENCE kv_version_seq bigint cache 1000

-- functions
CREATE OR REPLACE FUNCTION queen.kv_apply_at_v1(p_tenant uuid, p_ops jsonb, p_in_transaction boolean, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_max_batch INT := coalesce(nullif(current_setting('queen.kv_max_batch', true), '')::int, 1000);
  v_n INT;
  v_norm JSONB[] := '{}';
  v_results JSONB[];
  v_op JSONB;
  v_answer JSONB;
  v_dup INT;
  v_fail JSONB;
  v_read_budget BIGINT := coalesce(nullif(current_setting('queen.kv_max_read_bytes', true), '')::bigint, 4194304);
  i INT;
BEGIN
  IF p_ops IS NULL OR jsonb_typeof(p_ops) <> 'array' OR jsonb_array_length(p_ops) = 0 THEN
    PERFORM queen.kv_fail_v1('kv_operations_required', 'operations must be a non-empty array of KV operations.', NULL);
  END IF;
  v_n := jsonb_array_length(p_ops);
  IF v_n > v_max_batch THEN
    PERFORM queen.kv_fail_v1('kv_batch_too_large', format('The batch has %s operations; at most %s are allowed.', v_n, v_max_batch), NULL);
  END IF;

  FOR i IN 0 .. v_n - 1 LOOP
    v_norm := v_norm || queen.kv_check_op_v1(p_ops->i, i, p_in_transaction, p_now);
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
    IF v_dup IS NOT NULL THEN
      PERFORM queen.kv_fail_v1('kv_duplicate_key', format(
        'Operation %s touches a key that an earlier operation of this batch already touches; a batch touches a key at most once.', v_dup), v_dup);
    END IF;
  END IF;

  v_results := array_fill(NULL::jsonb, ARRAY[v_n]);
  -- Single-key operations in ascending (namespace, key) byte order: the lock order. Then the
  -- multi-key reads, which lock nothing.
  FOR v_op IN
    SELECT o FROM unnest(v_norm) o
     ORDER BY (o ? 'key') DESC, (o->>'ns') COLLATE "C", (o->>'key') COLLATE "C", (o->>'i')::int
  LOOP
    v_answer := CASE v_op->>'kind'
      WHEN 'get' THEN queen.kv_get_v1(p_tenant, v_op, p_now)
      WHEN 'getMany' THEN queen.kv_get_many_v1(p_tenant, v_op, p_now)
      WHEN 'getPrefix' THEN queen.kv_get_prefix_v1(p_tenant, v_op || jsonb_build_object('budget', v_read_budget), p_now)
      WHEN 'put' THEN queen.kv_put_v1(p_tenant, v_op, p_now)
      WHEN 'delete' THEN queen.kv_delete_v1(p_tenant, v_op, p_now)
      WHEN 'incr' THEN queen.kv_incr_v1(p_tenant, v_op, p_now)
    END;
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
    RAISE EXCEPTION USING ERRCODE = 'QK409', MESSAGE = 'kv_precondition',
      DETAIL = jsonb_build_object('failedIndex', v_fail->'index', 'kvReason', v_fail->'reason', 'version', v_fail->'version')::text,
      HINT = (v_fail->'value')::text;
  END IF;
  IF array_position(v_results, NULL) IS NOT NULL OR cardinality(v_results) <> v_n THEN
    RAISE EXCEPTION 'kv_apply_v1 produced % answers for % operations', cardinality(v_results) - coalesce(array_position(v_results, NULL), 0), v_n;
  END IF;
  RETURN to_jsonb(v_results);
END $function$
CREATE OR REPLACE FUNCTION queen.kv_apply_v1(p_tenant uuid, p_ops jsonb, p_in_transaction boolean DEFAULT false)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT queen.kv_apply_at_v1(p_tenant, p_ops, p_in_transaction, clock_timestamp()) $function$
CREATE OR REPLACE FUNCTION queen.kv_check_key_v1(p_key jsonb, p_index integer)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
  IF p_key IS NULL OR p_key = 'null'::jsonb OR p_key = '""'::jsonb THEN
    PERFORM queen.kv_fail_v1('kv_key_required', format('Operation %s needs key, 1 to 512 bytes of UTF-8.', p_index), p_index);
  END IF;
  IF jsonb_typeof(p_key) <> 'string' THEN
    PERFORM queen.kv_fail_v1('kv_invalid_key', format('Operation %s: a key is a string, got %s.', p_index, left(p_key::text, 40)), p_index);
  END IF;
  IF octet_length(p_key #>> '{}') > 512 THEN
    PERFORM queen.kv_fail_v1('kv_key_too_long', format(
      'Operation %s: the key is %s bytes of UTF-8; at most 512 are allowed.', p_index, octet_length(p_key #>> '{}')), p_index);
  END IF;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_check_op_v1(p_op jsonb, p_index integer, p_in_transaction boolean, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
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
BEGIN
  IF jsonb_typeof(p_op) IS DISTINCT FROM 'object' THEN
    PERFORM queen.kv_fail_v1('kv_unknown_op', format('Operation %s is not a JSON object.', p_index), p_index);
  END IF;
  v_name := CASE WHEN jsonb_typeof(p_op->'op') = 'string' THEN p_op->>'op' END;
  v_kind := CASE v_name
    WHEN 'get' THEN 'get' WHEN 'getMany' THEN 'getMany' WHEN 'getPrefix' THEN 'getPrefix'
    WHEN 'put' THEN 'put' WHEN 'putIfAbsent' THEN 'put' WHEN 'delete' THEN 'delete' WHEN 'incr' THEN 'incr' END;
  IF v_kind IS NULL THEN
    PERFORM queen.kv_fail_v1('kv_unknown_op', format(
      'Operation %s has op %s; it must be one of get, getMany, getPrefix, put, putIfAbsent, delete, incr.',
      p_index, coalesce((p_op->'op')::text, 'missing')), p_index);
  END IF;

  v_ns := p_op->'ns';
  IF v_ns IS NULL OR v_ns = 'null'::jsonb OR v_ns = '""'::jsonb THEN
    PERFORM queen.kv_fail_v1('kv_ns_required', format('Operation %s needs ns, the namespace.', p_index), p_index);
  END IF;
  IF jsonb_typeof(v_ns) <> 'string' OR NOT (v_ns #>> '{}') ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$' THEN
    PERFORM queen.kv_fail_v1('kv_invalid_namespace', format(
      'Operation %s has namespace %s; a namespace is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.',
      p_index, left(v_ns::text, 140)), p_index);
  END IF;
  v_out := jsonb_build_object('i', p_index, 'op', v_name, 'kind', v_kind, 'ns', v_ns);

  IF p_op ? 'required' AND jsonb_typeof(p_op->'required') <> 'boolean' THEN
    PERFORM queen.kv_fail_v1('kv_invalid_field', format('Operation %s: required must be true or false.', p_index), p_index);
  END IF;
  IF v_kind IN ('get', 'getMany', 'getPrefix') AND p_op ? 'required' THEN
    PERFORM queen.kv_fail_v1('kv_invalid_field', format(
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
      PERFORM queen.kv_fail_v1('kv_key_required', format('Operation %s (getMany) needs keys, a non-empty array of keys.', p_index), p_index);
    END IF;
    IF jsonb_array_length(p_op->'keys') > v_max_batch THEN
      PERFORM queen.kv_fail_v1('kv_batch_too_large', format(
        'Operation %s asks for %s keys; at most %s keys are read in one call.', p_index, jsonb_array_length(p_op->'keys'), v_max_batch), p_index);
    END IF;
    FOR v_key IN SELECT k FROM jsonb_array_elements(p_op->'keys') k LOOP
      PERFORM queen.kv_check_key_v1(v_key, p_index);
    END LOOP;
    RETURN v_out || jsonb_build_object('keys', p_op->'keys');
  END IF;

  IF v_kind = 'getPrefix' THEN
    IF p_in_transaction THEN
      PERFORM queen.kv_fail_v1('kv_get_prefix_not_allowed_in_transaction', format(
        'Operation %s: getPrefix is unbounded read work and is not allowed inside a transaction; use POST /api/v1/kv.', p_index), p_index);
    END IF;
    IF jsonb_typeof(p_op->'prefix') IS DISTINCT FROM 'string' OR p_op->>'prefix' = '' THEN
      PERFORM queen.kv_fail_v1('kv_prefix_required', format(
        'Operation %s (getPrefix) needs a non-empty prefix; a namespace is not a table to enumerate.', p_index), p_index);
    END IF;
    IF octet_length(p_op->>'prefix') > 512 THEN
      PERFORM queen.kv_fail_v1('kv_key_too_long', format('Operation %s: the prefix is longer than 512 bytes, the longest key.', p_index), p_index);
    END IF;
    v_limit := p_op->'limit';
    IF v_limit IS NULL OR v_limit = 'null'::jsonb THEN
      v_limit_n := 100;
    ELSIF jsonb_typeof(v_limit) = 'number' THEN
      v_limit_n := floor(v_limit::numeric);
    ELSE
      PERFORM queen.kv_fail_v1('kv_invalid_field', format('Operation %s: limit must be a number.', p_index), p_index);
    END IF;
    -- Clamped, never refused: a 400 on a high limit is an error the caller cannot fix without
    -- reading the server's configuration.
    v_limit_n := least(greatest(v_limit_n, 1), v_prefix_limit);
    IF p_op ? 'after' AND p_op->'after' <> 'null'::jsonb AND jsonb_typeof(p_op->'after') <> 'string' THEN
      PERFORM queen.kv_fail_v1('kv_invalid_field', format('Operation %s: after must be a key (a string) or null.', p_index), p_index);
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
      PERFORM queen.kv_fail_v1('kv_invalid_field', format('Operation %s: forever must be true when given.', p_index), p_index);
    END IF;
    v_has_ttl := v_ttl IS NOT NULL AND v_ttl <> 'null'::jsonb;
    -- coalesce: without it an absent forever makes this NULL, `false = NULL` is NULL, and a write
    -- with neither expiry would slip past the check below and be stored forever.
    v_is_forever := coalesce(v_forever = 'true'::jsonb, false);
    IF v_has_ttl = v_is_forever THEN
      PERFORM queen.kv_fail_v1('kv_expiry_not_specified', format(
        'Operation %s (%s) needs exactly one of ttlSeconds (a whole number above zero) or forever: true; it has %s.',
        p_index, v_name, CASE WHEN v_has_ttl THEN 'both' ELSE 'neither' END), p_index);
    END IF;
    IF v_has_ttl THEN
      IF jsonb_typeof(v_ttl) <> 'number' OR v_ttl::numeric <> trunc(v_ttl::numeric)
         OR v_ttl::numeric <= 0 OR v_ttl::numeric > 3155760000 THEN
        PERFORM queen.kv_fail_v1('kv_invalid_ttl', format(
          'Operation %s: ttlSeconds must be a whole number of seconds from 1 to 3155760000 (100 years), got %s.',
          p_index, left(v_ttl::text, 40)), p_index);
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
      PERFORM queen.kv_fail_v1('kv_expect_invalid', format(
        'Operation %s: putIfAbsent is put with expect: 0 and takes no expect of its own.', p_index), p_index);
    ELSIF v_kind = 'incr' THEN
      PERFORM queen.kv_fail_v1('kv_expect_invalid', format(
        'Operation %s: incr has no expect, deliberately: it exists to remove the compare-and-set loop.', p_index), p_index);
    ELSIF jsonb_typeof(v_expect) IS DISTINCT FROM 'number' OR v_expect::numeric <> trunc(v_expect::numeric)
       OR v_expect::numeric < 0 OR v_expect::numeric > 9223372036854775807 THEN
      PERFORM queen.kv_fail_v1('kv_expect_invalid', format(
        'Operation %s: expect must be 0 (must not exist) or a version; got %s. To write unconditionally, leave expect out.',
        p_index, left(v_expect::text, 40)), p_index);
    ELSIF v_kind = 'delete' AND v_expect::numeric = 0 THEN
      PERFORM queen.kv_fail_v1('kv_expect_invalid', format(
        'Operation %s: a delete with expect: 0 could only delete nothing; give the version to fence on.', p_index), p_index);
    END IF;
    v_out := v_out || jsonb_build_object('expect', v_expect);
  ELSIF v_name = 'putIfAbsent' THEN
    v_out := v_out || jsonb_build_object('expect', 0);
  END IF;

  IF v_kind = 'put' THEN
    IF NOT p_op ? 'value' THEN
      PERFORM queen.kv_fail_v1('kv_value_required', format(
        'Operation %s (%s) needs value; null is a legal value and must be written out.', p_index, v_name), p_index);
    END IF;
    IF octet_length((p_op->'value')::text) > 65536 THEN
      PERFORM queen.kv_fail_v1('kv_value_too_large', format(
        'Operation %s: the value is %s bytes as stored; at most 65536 bytes are allowed.', p_index, octet_length((p_op->'value')::text)), p_index);
    END IF;
    RETURN v_out || jsonb_build_object('value', p_op->'value');
  END IF;

  IF v_kind = 'incr' THEN
    IF p_op ? 'value' THEN
      PERFORM queen.kv_fail_v1('kv_invalid_field', format(
        'Operation %s: incr takes delta, not value; a missing or expired counter starts from 0.', p_index), p_index);
    END IF;
    IF p_op ? 'delta' AND jsonb_typeof(p_op->'delta') IS DISTINCT FROM 'number' THEN
      PERFORM queen.kv_fail_v1('kv_invalid_delta', format('Operation %s: delta must be a number, got %s.', p_index, left((p_op->'delta')::text, 40)), p_index);
    END IF;
    v_min := nullif(p_op->'min', 'null'::jsonb);
    v_max := nullif(p_op->'max', 'null'::jsonb);
    IF (v_min IS NOT NULL AND jsonb_typeof(v_min) <> 'number') OR (v_max IS NOT NULL AND jsonb_typeof(v_max) <> 'number') THEN
      PERFORM queen.kv_fail_v1('kv_invalid_limit_bounds', format('Operation %s: min and max must be numbers when given.', p_index), p_index);
    END IF;
    IF v_min IS NOT NULL AND v_max IS NOT NULL AND v_min::numeric > v_max::numeric THEN
      PERFORM queen.kv_fail_v1('kv_invalid_limit_bounds', format('Operation %s: min (%s) is above max (%s).', p_index, v_min, v_max), p_index);
    END IF;
    RETURN v_out || jsonb_build_object('delta', coalesce(p_op->'delta', '1'::jsonb), 'min', v_min, 'max', v_max);
  END IF;

  RETURN v_out; -- delete
END $function$
CREATE OR REPLACE FUNCTION queen.kv_delete_v1(p_tenant uuid, o jsonb, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_ns TEXT := o->>'ns';
  v_key TEXT := o->>'key';
  v_expect BIGINT := (o->>'expect')::bigint;
  r queen.kv;
  v_none queen.kv;
BEGIN
  DELETE FROM queen.kv AS k
   WHERE k.tenant_id = p_tenant AND k.namespace = v_ns AND k.key = v_key
     AND (v_expect IS NULL OR (queen.kv_live_v1(k.expires_at, p_now) AND k.version = v_expect))
  RETURNING * INTO r;
  IF FOUND AND queen.kv_live_v1(r.expires_at, p_now) THEN
    RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, true, NULL, v_none, p_now);
  END IF;
  IF FOUND THEN
    -- An expired row was physically removed; as far as anyone can tell nothing was there.
    RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, false, 'absent', v_none, p_now);
  END IF;
  SELECT * INTO r FROM queen.kv WHERE tenant_id = p_tenant AND namespace = v_ns AND key = v_key;
  RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, false,
    CASE WHEN r.key IS NOT NULL AND queen.kv_live_v1(r.expires_at, p_now) THEN 'version' ELSE 'absent' END, r, p_now);
END $function$
CREATE OR REPLACE FUNCTION queen.kv_fail_v1(p_code text, p_message text, p_index integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QK400', MESSAGE = p_message,
    DETAIL = jsonb_build_object('code', p_code, 'index', p_index)::text;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_get_many_v1(p_tenant uuid, o jsonb, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  WITH asked AS (
    SELECT k COLLATE "C" AS key FROM jsonb_array_elements_text(o->'keys') k
  ), found AS (
    SELECT kv FROM queen.kv kv
     WHERE kv.tenant_id = p_tenant AND kv.namespace = o->>'ns'
       AND kv.key = ANY (ARRAY(SELECT key FROM asked)) AND queen.kv_live_v1(kv.expires_at, p_now)
  )
  SELECT jsonb_build_object(
    'index', (o->>'i')::int, 'op', 'getMany',
    'rows', coalesce((SELECT jsonb_agg(queen.kv_row_json_v1(f.kv) ORDER BY (f.kv).key COLLATE "C") FROM found f), '[]'::jsonb),
    'missing', coalesce((SELECT jsonb_agg(a.key ORDER BY a.key COLLATE "C") FROM asked a
                          WHERE NOT EXISTS (SELECT 1 FROM found f WHERE (f.kv).key = a.key)), '[]'::jsonb))
$function$
CREATE OR REPLACE FUNCTION queen.kv_get_prefix_v1(p_tenant uuid, o jsonb, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.kv_get_v1(p_tenant uuid, o jsonb, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  r queen.kv;
BEGIN
  SELECT * INTO r FROM queen.kv
   WHERE tenant_id = p_tenant AND namespace = o->>'ns' AND key = o->>'key' AND queen.kv_live_v1(expires_at, p_now);
  IF NOT FOUND THEN
    RETURN jsonb_build_object('index', (o->>'i')::int, 'op', 'get', 'key', o->'key', 'found', false);
  END IF;
  RETURN jsonb_build_object('index', (o->>'i')::int, 'op', 'get', 'found', true) || queen.kv_row_json_v1(r);
END $function$
CREATE OR REPLACE FUNCTION queen.kv_incr_v1(p_tenant uuid, o jsonb, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_ns TEXT := o->>'ns';
  v_key TEXT := o->>'key';
  v_delta NUMERIC := (o->>'delta')::numeric;
  v_min NUMERIC := (o->>'min')::numeric;
  v_max NUMERIC := (o->>'max')::numeric;
  v_expires TIMESTAMPTZ := (o->>'expiresAt')::timestamptz;
  v_found BOOLEAN;
  v_live BOOLEAN;
  v_next NUMERIC;
  r queen.kv;
BEGIN
  LOOP
    SELECT * INTO r FROM queen.kv
     WHERE tenant_id = p_tenant AND namespace = v_ns AND key = v_key FOR UPDATE;
    v_found := FOUND;
    v_live := v_found AND queen.kv_live_v1(r.expires_at, p_now);
    IF v_live AND jsonb_typeof(r.value) <> 'number' THEN
      RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, false, 'type', r, p_now);
    END IF;
    v_next := CASE WHEN v_live THEN r.value::numeric ELSE 0 END + v_delta;
    IF (v_min IS NOT NULL AND v_next < v_min) OR (v_max IS NOT NULL AND v_next > v_max) THEN
      RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, false, 'limit', r, p_now);
    END IF;
    IF v_found THEN
      UPDATE queen.kv SET value = to_jsonb(v_next), version = nextval('queen.kv_version_seq'), updated_at = p_now,
             expires_at = CASE WHEN v_live THEN expires_at ELSE v_expires END,
             created_at = CASE WHEN v_live THEN created_at ELSE p_now END
       WHERE tenant_id = p_tenant AND namespace = v_ns AND key = v_key
      RETURNING * INTO r;
      RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, true, NULL, r, p_now);
    END IF;
    INSERT INTO queen.kv (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, v_ns, v_key, to_jsonb(v_next), nextval('queen.kv_version_seq'), v_expires, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO NOTHING
    RETURNING * INTO r;
    IF FOUND THEN
      RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, true, NULL, r, p_now);
    END IF;
    -- Somebody created it between our SELECT and INSERT: go round and lock theirs.
  END LOOP;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_live_v1(timestamp with time zone, timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT $1 IS NULL OR $1 > $2 $function$
CREATE OR REPLACE FUNCTION queen.kv_prefix_upper_v1(p_prefix text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.kv_put_v1(p_tenant uuid, o jsonb, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_ns TEXT := o->>'ns';
  v_key TEXT := o->>'key';
  v_expires TIMESTAMPTZ := (o->>'expiresAt')::timestamptz;
  v_expect BIGINT := (o->>'expect')::bigint;
  r queen.kv;
BEGIN
  IF v_expect IS NULL THEN
    -- Unconditional upsert: replaces the value AND the expiry (a put never inherits a TTL). Over an
    -- expired row it starts a new lineage.
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, v_ns, v_key, o->'value', nextval('queen.kv_version_seq'), v_expires, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = EXCLUDED.value, version = EXCLUDED.version, expires_at = EXCLUDED.expires_at,
      updated_at = EXCLUDED.updated_at,
      created_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.created_at ELSE EXCLUDED.created_at END
    RETURNING * INTO r;
    RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, true, NULL, r, p_now);
  END IF;

  IF v_expect = 0 THEN
    -- Must not exist: wins against an expired row still physically there, and resets created_at
    -- (a new lineage). ON CONFLICT locks the row even when the WHERE fails, so the SELECT below
    -- reads the winner we lost to.
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, v_ns, v_key, o->'value', nextval('queen.kv_version_seq'), v_expires, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = EXCLUDED.value, version = EXCLUDED.version, expires_at = EXCLUDED.expires_at,
      created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at
    WHERE NOT queen.kv_live_v1(k.expires_at, p_now)
    RETURNING * INTO r;
    IF FOUND THEN
      RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, true, NULL, r, p_now);
    END IF;
    SELECT * INTO r FROM queen.kv WHERE tenant_id = p_tenant AND namespace = v_ns AND key = v_key;
    RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, false, 'exists', r, p_now);
  END IF;

  -- expect: N > 0 never creates a row: a conditional write that matches nothing writes nothing.
  UPDATE queen.kv AS k SET value = o->'value', version = nextval('queen.kv_version_seq'),
         expires_at = v_expires, updated_at = p_now
   WHERE k.tenant_id = p_tenant AND k.namespace = v_ns AND k.key = v_key
     AND queen.kv_live_v1(k.expires_at, p_now) AND k.version = v_expect
  RETURNING * INTO r;
  IF FOUND THEN
    RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, true, NULL, r, p_now);
  END IF;
  SELECT * INTO r FROM queen.kv WHERE tenant_id = p_tenant AND namespace = v_ns AND key = v_key;
  RETURN queen.kv_write_answer_v1((o->>'i')::int, o->>'op', v_key, false,
    CASE WHEN r.key IS NOT NULL AND queen.kv_live_v1(r.expires_at, p_now) THEN 'version' ELSE 'absent' END, r, p_now);
END $function$
CREATE OR REPLACE FUNCTION queen.kv_row_json_v1(r queen.kv)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT jsonb_build_object('key', r.key, 'value', r.value, 'version', r.version,
                            'expiresAt', queen.kv_ts_v1(r.expires_at), 'updatedAt', queen.kv_ts_v1(r.updated_at))
$function$
CREATE OR REPLACE FUNCTION queen.kv_ts_v1(timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT to_char($1 AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$function$
CREATE OR REPLACE FUNCTION queen.kv_ver_v1(bigint, timestamp with time zone, timestamp with time zone)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN $1 IS NOT NULL AND queen.kv_live_v1($2, $3) THEN $1 ELSE 0 END
$function$
CREATE OR REPLACE FUNCTION queen.kv_write_answer_v1(p_index integer, p_op text, p_key text, p_applied boolean, p_reason text, r queen.kv, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_live BOOLEAN := r.key IS NOT NULL AND queen.kv_live_v1(r.expires_at, p_now);
  v_answer JSONB;
BEGIN
  v_answer := jsonb_build_object(
    'index', p_index, 'op', p_op, 'key', p_key, 'applied', p_applied, 'found', v_live,
    'value', CASE WHEN v_live THEN r.value ELSE 'null'::jsonb END,
    'version', CASE WHEN v_live THEN r.version ELSE 0 END,
    'expiresAt', CASE WHEN v_live THEN queen.kv_ts_v1(r.expires_at) END,
    'updatedAt', CASE WHEN v_live THEN queen.kv_ts_v1(r.updated_at) END);
  IF NOT p_applied THEN
    v_answer := v_answer || jsonb_build_object('reason', p_reason);
  END IF;
  RETURN v_answer;
END $function$
