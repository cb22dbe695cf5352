-- The KV rules, written once. queen.kv_apply_v1 is the one procedure behind every KV route and
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
BEGIN
  IF NOT coalesce(queen.name_ok_v1(p_ns), false)
     OR jsonb_typeof(p_rest) IS DISTINCT FROM 'object'
     OR NOT queen.kv_fast_path_v1() THEN
    RETURN NULL;
  END IF;
  IF p_whole THEN
    p_rest := p_rest - '{op,ns,key}'::text[];
  END IF;
  IF p_op = 'getMany' THEN
    -- The keys: 1 to kv_max_batch distinct keys.
    RETURN CASE WHEN p_key IS NULL AND jsonb_typeof(p_rest->'keys') = 'array' AND (p_rest - 'keys') = '{}'::jsonb
                THEN (SELECT a FROM queen.kv_get_many_v1(p_tenant, 0, p_ns, p_rest->'keys', p_now) a
                       WHERE (SELECT count(*) BETWEEN 1 AND queen.limit_v1('kv_max_batch')
                                     AND bool_and(jsonb_typeof(k) = 'string' AND queen.kv_key_ok_v1(k #>> '{}'))
                                     AND count(DISTINCT k) = count(*)
                                FROM jsonb_array_elements(p_rest->'keys') k)) END;
  END IF;
  IF NOT coalesce(queen.kv_key_ok_v1(p_key), false) THEN
    RETURN NULL;
  END IF;
  -- The guards are kv_checks.sql's, the ones the batch fast check runs.
  IF p_op = 'get' THEN
    RETURN CASE WHEN p_rest = '{}'::jsonb THEN (SELECT a FROM queen.kv_get_key_v1(p_tenant, 0, p_ns, p_key, p_now) a) END;
  END IF;
  IF p_op = 'delete' THEN
    RETURN CASE WHEN p_rest = '{}'::jsonb THEN queen.kv_delete_key_v1(p_tenant, 0, p_op, p_ns, p_key, NULL, p_now) END;
  END IF;
  IF p_op IN ('put', 'putIfAbsent') THEN
    RETURN CASE WHEN queen.kv_plain_put_v1(p_rest, '{}')
                THEN queen.kv_put_key_v1(p_tenant, 0, p_op, p_ns, p_key, p_rest->'value', queen.kv_expires_at_v1(p_rest->'ttlSeconds', p_now),
                       CASE WHEN p_op = 'putIfAbsent' THEN 0 END, p_now) END;
  END IF;
  IF p_op = 'incr' THEN
    RETURN CASE WHEN queen.kv_plain_incr_v1(p_rest)
                THEN queen.kv_incr_key_v1(p_tenant, 0, p_op, p_ns, p_key, coalesce((p_rest->>'delta')::numeric, 1),
                       (p_rest->>'min')::numeric, (p_rest->>'max')::numeric, queen.kv_expires_at_v1(p_rest->'ttlSeconds', p_now), p_now) END;
  END IF;
  RETURN NULL;
END $$;

-- The verdict of a lost `required`, from the answer of the write that lost (see the header).
CREATE OR REPLACE FUNCTION queen.kv_verdict_v1(p_answer JSONB) RETURNS JSONB
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_build_object('ok', false, 'success', false, 'reason', 'kv_precondition',
                            'failedIndex', p_answer->'index', 'kvReason', p_answer->'reason',
                            'version', p_answer->'version', 'value', p_answer->'value')
$$;

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
  v_read_budget BIGINT := queen.limit_v1('kv_max_read_bytes');
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
    RAISE EXCEPTION USING ERRCODE = 'QK409', MESSAGE = 'kv_precondition', DETAIL = queen.kv_verdict_v1(v_fail)::text;
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
  v_n INT;
  v_norm JSONB[] := '{}';
  v_op JSONB;
  v_answer JSONB;
  v_dup INT;
  v_prefix_dup INT;
  v_has_prefix BOOLEAN := false;
  v_required BOOLEAN := false;
  v_lone_required BOOLEAN;
  v_verdict TEXT;
  i INT;
BEGIN
  -- One plainly valid operation: nothing to sort, no duplicate to find. A `required` put,
  -- putIfAbsent or incr (the once-marker of a bundle) takes the fast path too: a lone write that
  -- loses wrote nothing (a live key there, a bound crossed), so its verdict needs no sub-block to
  -- undo anything. Not a delete: one over an expired row removes it and answers not applied, a
  -- write the general path rolls back.
  IF jsonb_typeof(p_ops) = 'array' AND jsonb_array_length(p_ops) = 1 AND jsonb_typeof(p_ops->0) = 'object' THEN
    v_op := p_ops->0;
    v_lone_required := jsonb_typeof(v_op->'required') = 'boolean' AND jsonb_typeof(v_op->'op') = 'string'
                       AND v_op->>'op' IN ('put', 'putIfAbsent', 'incr');
    v_answer := queen.kv_apply_fast_v1(p_tenant,
      CASE WHEN jsonb_typeof(v_op->'op') = 'string' THEN v_op->>'op' END,
      CASE WHEN jsonb_typeof(v_op->'ns') = 'string' THEN v_op->>'ns' END,
      -- '' for a key that is there but not a string: no fast path takes it.
      CASE WHEN jsonb_typeof(v_op->'key') = 'string' THEN v_op->>'key' WHEN v_op ? 'key' THEN '' END,
      CASE WHEN v_lone_required THEN v_op - 'required' ELSE v_op END, p_now, true);
    IF v_answer IS NOT NULL THEN
      IF v_lone_required AND (v_op->>'required')::boolean AND NOT (v_answer->>'applied')::boolean THEN
        RETURN queen.kv_verdict_v1(v_answer);
      END IF;
      RETURN jsonb_build_array(v_answer);
    END IF;
  END IF;
  v_n := queen.array_length_v1(p_ops, 'kv_operations_required', 'operations must be a non-empty array of KV operations.', NULL,
    queen.limit_v1('kv_max_batch'), 'kv_batch_too_large', 'The batch has %s operations; at most %s are allowed.');

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
  IF v_n > 1 AND queen.kv_fast_path_v1()
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
    queen.tenant_gate_v1(p_tenant),
    -- A lone operation with `required` (a bundle's once-marker) goes straight to kv_apply_at_v1,
    -- whose fast path takes it with its verdict: this one would only decline it, after its checks.
    CASE WHEN jsonb_typeof(p_ops) = 'array' AND p_ops->1 IS NULL AND NOT coalesce(p_ops->0 ? 'required', false) THEN
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
  SELECT coalesce(queen.tenant_gate_v1(p_tenant),
                  queen.kv_apply_fast_v1(p_tenant, p_op, p_ns, p_key, p_body, clock_timestamp(), false),
                  ('[]'::jsonb || queen.kv_apply_at_v1(p_tenant, jsonb_build_array(jsonb_build_object('op', p_op, 'ns', p_ns, 'key', p_key) || p_body),
                                                       false, clock_timestamp())) -> 0)
$$;
