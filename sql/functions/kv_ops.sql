-- The KV operations, each on one key (or one read of many), with its answer; called by the
-- general path with a checked, normalised operation and by the fast paths with the fields as values
-- (kv_apply.sql). Existence, the effective version and the answer's shape are defined here once.

-- The per-operation functions take the operation's fields as values, not as a jsonb object: the
-- general path (kv_apply_at_v1) reads them out of the normalised operation, the fast path
-- (kv_apply_fast_v1) passes what it already holds, and both reach the same statements. Each write
-- answers from its own RETURNING: one statement per outcome, no row variable to render afterwards.
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
                            'expiresAt', queen.ts_v1(r.expires_at), 'updatedAt', queen.ts_v1(r.updated_at))
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
                                   'expiresAt', queen.ts_v1(r.expires_at), 'updatedAt', queen.ts_v1(r.updated_at))
           ELSE jsonb_build_object('index', p_index, 'op', p_op, 'key', p_key, 'applied', p_applied, 'found', false,
                                   'value', 'null'::jsonb, 'version', 0, 'expiresAt', NULL, 'updatedAt', NULL) END
         || CASE WHEN p_applied THEN '{}'::jsonb ELSE jsonb_build_object('reason', p_reason) END
$$;

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
  IF NOT queen.kv_value_ok_v1(p_answer->'value') THEN
    PERFORM queen.fail_v1('kv_value_too_large', format(
      'Operation %s: the counter would be %s bytes as stored; at most %s bytes are allowed. Nothing was written.',
      p_index, octet_length((p_answer->'value')::text), queen.kv_max_value_bytes_v1()), p_index);
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
-- The ceiling is the whole call's (docs/kv.md: the byte ceiling applies to the whole call): kv_apply_at_v1
-- passes what is left of it in o->'budget' and reads back the bytes spent in '_bytes'. Only the
-- first page of a call may overshoot it by one row, so a single value above the ceiling still
-- makes progress; a later page with nothing left answers no rows, truncated, and its own cursor.
CREATE OR REPLACE FUNCTION queen.kv_get_prefix_v1(p_tenant UUID, o JSONB, p_now TIMESTAMPTZ) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_ns TEXT := o->>'ns';
  v_prefix TEXT := o->>'prefix';
  -- Past every key under the prefix. Without a successor (a run of U+10FFFF), one U+10FFFF (4
  -- bytes) more than a key's bound holds: 129 of them, 516 bytes, past any key of at most 512.
  v_upper TEXT := coalesce(queen.kv_prefix_upper_v1(o->>'prefix'), (o->>'prefix') || repeat(chr(1114111), queen.kv_max_key_bytes_v1() / 4 + 1));
  v_after TEXT := coalesce(o->>'after', '');
  v_limit INT := (o->>'limit')::int;
  v_call_max BIGINT := queen.limit_v1('kv_max_read_bytes');
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
