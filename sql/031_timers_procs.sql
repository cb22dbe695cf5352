-- 031: the timer rules and the sweeper's passes, written once. The routes, the transaction wire's
-- `timers` array and the sweeper only carry JSON text in and out of these functions.
--
-- Refusals raise SQLSTATE QK400 with DETAIL {"code", "index"} through queen.fail_v1, like the KV and the log.
-- Limits come from session settings the pools send at connect (shared/config.ts), with the
-- SPEC's defaults when a caller did not set them.
--
-- Race outcomes (each one is a test in test/timers/):
--  * cancel against fire: the fire claims with FOR UPDATE SKIP LOCKED, cancel and reschedule lock
--    the row. A cancel that locks first wins: the fire skips the row, the cancel deletes it and
--    answers cancelled:true, and the timer never fires. A fire that locks first wins: the cancel
--    waits for the fire's commit, finds no row, and answers cancelled:false, reason "absent"; the
--    message is in the log exactly once.
--  * reschedule against fire: the same, with rescheduled:true (the new deliverAt holds, the old one
--    never fires) or rescheduled:false, reason "absent" (it already fired).
--  * schedule with a timerKey against schedule with the same key: the unique index serialises them;
--    one answers created:true, the other waits for its commit and answers that timer, created:false.
--    Once the timer has fired (or been cancelled) the key is free, and a new schedule creates anew.

-- Timestamps on the wire: ISO 8601, UTC, milliseconds (queen.kv_ts_v1).

CREATE OR REPLACE FUNCTION queen.timers_row_json_v1(r queen.log_timers) RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'timerId', r.timer_id, 'queue', r.queue, 'partition', r.partition,
    'deliverAt', queen.kv_ts_v1(r.deliver_at), 'payload', r.payload,
    'createdAt', queen.kv_ts_v1(r.created_at))
    || CASE WHEN r.timer_key IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('timerKey', r.timer_key) END
$$;

CREATE OR REPLACE FUNCTION queen.timers_uuid_v1(p_value JSONB, p_index INT) RETURNS UUID
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF jsonb_typeof(p_value) IS DISTINCT FROM 'string'
     OR (p_value #>> '{}') !~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
    PERFORM queen.fail_v1('timers_invalid_timer_id',
      format('Operation %s: timerId must be a timer id (a UUID).', p_index), p_index);
  END IF;
  RETURN (p_value #>> '{}')::uuid;
END $$;

-- When a schedule or reschedule delivers: exactly one of deliverAt (ISO 8601 with a zone) or
-- delaySeconds (a number >= 0), never beyond the horizon. A past deliverAt is allowed: it fires at
-- the next sweep. To the millisecond, the precision of the wire (a deliverAt rounds up, below).
CREATE OR REPLACE FUNCTION queen.timers_when_v1(p_op JSONB, p_index INT, p_now TIMESTAMPTZ) RETURNS TIMESTAMPTZ
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_horizon BIGINT := coalesce(nullif(current_setting('queen.timers_max_horizon_seconds', true), '')::bigint, 31536000);
  v_at TIMESTAMPTZ;
  v_text TEXT;
  v_delay NUMERIC;
BEGIN
  IF p_op ? 'deliverAt' AND p_op ? 'delaySeconds' THEN
    PERFORM queen.fail_v1('timers_when_conflict',
      format('Operation %s: give either deliverAt or delaySeconds, not both.', p_index), p_index);
  ELSIF p_op ? 'deliverAt' THEN
    v_text := p_op ->> 'deliverAt';
    IF jsonb_typeof(p_op -> 'deliverAt') IS DISTINCT FROM 'string'
       -- Up to nine fraction digits: Java's Instant.toString and Go's RFC3339Nano write nanoseconds,
       -- .NET's "o" seven digits; all were refused while the rule stopped at six.
       OR v_text !~ '^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|z|[+-]\d{2}(:?\d{2})?)$' THEN
      PERFORM queen.fail_v1('timers_invalid_deliver_at',
        format('Operation %s: deliverAt must be an ISO 8601 timestamp with a zone, such as 2030-01-01T00:00:00Z.', p_index), p_index);
    END IF;
    BEGIN
      v_at := v_text::timestamptz;
    EXCEPTION WHEN OTHERS THEN
      PERFORM queen.fail_v1('timers_invalid_deliver_at',
        format('Operation %s: deliverAt %s is not a date that exists.', p_index, v_text), p_index);
    END;
  ELSIF p_op ? 'delaySeconds' THEN
    IF jsonb_typeof(p_op -> 'delaySeconds') IS DISTINCT FROM 'number' OR (p_op ->> 'delaySeconds')::numeric < 0 THEN
      PERFORM queen.fail_v1('timers_invalid_delay',
        format('Operation %s: delaySeconds must be a number of seconds, 0 or more.', p_index), p_index);
    END IF;
    v_delay := (p_op ->> 'delaySeconds')::numeric;
    IF v_delay > v_horizon THEN
      PERFORM queen.fail_v1('timers_beyond_horizon',
        format('Operation %s: a timer may be at most %s seconds ahead (QUEEN_TIMERS_MAX_HORIZON_SECONDS).', p_index, v_horizon), p_index);
    END IF;
    -- Rounded to microseconds (the timestamp's own precision) first: a tiny positive delay such as
    -- 1e-400 is a valid numeric but underflows double precision, which raised 22003 (a 400
    -- invalid_json echoing the whole number) instead of meaning "now".
    v_at := p_now + make_interval(secs => round(v_delay, 6)::double precision);
  ELSE
    PERFORM queen.fail_v1('timers_when_required',
      format('Operation %s: say when, with deliverAt (ISO 8601) or delaySeconds.', p_index), p_index);
  END IF;
  -- deliverAt is a floor and the wire's precision is the millisecond: a sub-millisecond instant
  -- rounds up to the next millisecond (.123999 delivers at .124, as the answer says), never down to
  -- an instant before the one asked for.
  IF p_op ? 'deliverAt' THEN
    v_at := date_trunc('milliseconds', v_at + interval '999 microseconds');
  END IF;
  IF v_at > p_now + make_interval(secs => v_horizon) THEN
    PERFORM queen.fail_v1('timers_beyond_horizon',
      format('Operation %s: a timer may be at most %s seconds ahead (QUEEN_TIMERS_MAX_HORIZON_SECONDS).', p_index, v_horizon), p_index);
  END IF;
  RETURN date_trunc('milliseconds', v_at);
END $$;

-- Shape rules of one operation. Returns the deliver_at it resolves to (NULL for a cancel).
CREATE OR REPLACE FUNCTION queen.timers_check_op_v1(p_op JSONB, p_index INT, p_now TIMESTAMPTZ) RETURNS TIMESTAMPTZ
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_max_payload BIGINT := coalesce(nullif(current_setting('queen.timers_max_payload_bytes', true), '')::bigint, 65536);
  v_kind TEXT;
  v_fields TEXT[];
BEGIN
  IF jsonb_typeof(p_op) IS DISTINCT FROM 'object' THEN
    PERFORM queen.fail_v1('timers_unknown_op', format('Operation %s must be an object with op.', p_index), p_index);
  END IF;
  v_kind := CASE WHEN jsonb_typeof(p_op -> 'op') = 'string' THEN p_op ->> 'op' END;
  IF v_kind IS NULL OR v_kind NOT IN ('schedule', 'cancel', 'reschedule') THEN
    PERFORM queen.fail_v1('timers_unknown_op',
      format('Operation %s: op must be one of schedule, cancel, reschedule.', p_index), p_index);
  END IF;
  -- A field the operation does not take is refused, never ignored: a misspelled timerKey ignored
  -- makes every retry of a schedule a new timer, each delivered (docs/timers.md gives the fields).
  v_fields := CASE v_kind WHEN 'schedule' THEN '{op,queue,partition,payload,deliverAt,delaySeconds,timerKey}'
                          WHEN 'cancel' THEN '{op,timerId}' ELSE '{op,timerId,deliverAt,delaySeconds}' END;
  IF (p_op - v_fields) <> '{}'::jsonb THEN
    PERFORM queen.fail_v1('timers_invalid_field', format('Operation %s (%s) has a field %s does not take: %s. Its fields are %s.',
      p_index, v_kind, v_kind, (SELECT string_agg(left(f, 64), ', ' ORDER BY f) FROM jsonb_object_keys(p_op - v_fields) f),
      array_to_string(v_fields, ', ')), p_index);
  END IF;
  IF v_kind = 'cancel' THEN
    PERFORM queen.timers_uuid_v1(p_op -> 'timerId', p_index);
    RETURN NULL;
  END IF;
  IF v_kind = 'reschedule' THEN
    PERFORM queen.timers_uuid_v1(p_op -> 'timerId', p_index);
    RETURN queen.timers_when_v1(p_op, p_index, p_now);
  END IF;
  -- The log's own name rule (queen.log_name_ok_v1), checked now: a name the log would refuse at
  -- fire time would be a promise that can never be kept.
  IF jsonb_typeof(p_op -> 'queue') IS DISTINCT FROM 'string' THEN
    PERFORM queen.fail_v1('timers_queue_required',
      format('Operation %s: queue is required (the queue the message is delivered to).', p_index), p_index);
  END IF;
  IF NOT queen.log_name_ok_v1(p_op ->> 'queue') THEN
    PERFORM queen.fail_v1('timers_invalid_queue', format(
      'Operation %s: a queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', p_index), p_index);
  END IF;
  IF p_op ? 'partition' AND p_op -> 'partition' <> 'null'::jsonb
     AND (jsonb_typeof(p_op -> 'partition') IS DISTINCT FROM 'string' OR NOT queen.log_name_ok_v1(p_op ->> 'partition')) THEN
    PERFORM queen.fail_v1('timers_invalid_partition', format(
      'Operation %s: a partition name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', p_index), p_index);
  END IF;
  IF NOT p_op ? 'payload' THEN
    PERFORM queen.fail_v1('timers_payload_required',
      format('Operation %s: payload is required (it becomes the message).', p_index), p_index);
  END IF;
  IF octet_length((p_op -> 'payload')::text) > v_max_payload THEN
    PERFORM queen.fail_v1('timers_payload_too_large',
      format('Operation %s: the payload is larger than %s bytes (QUEEN_TIMERS_MAX_PAYLOAD_BYTES).', p_index, v_max_payload), p_index);
  END IF;
  IF p_op ? 'timerKey' AND p_op -> 'timerKey' <> 'null'::jsonb
     AND (jsonb_typeof(p_op -> 'timerKey') IS DISTINCT FROM 'string' OR length(p_op ->> 'timerKey') NOT BETWEEN 1 AND 512) THEN
    PERFORM queen.fail_v1('timers_invalid_timer_key',
      format('Operation %s: timerKey must be a string of 1 to 512 characters.', p_index), p_index);
  END IF;
  RETURN queen.timers_when_v1(p_op, p_index, p_now);
END $$;

-- The one procedure behind the timer routes and the transaction wire's `timers` array. Every
-- operation is checked before any runs (the first bad one is the 400, with its index); then the
-- operations on existing timers run in ascending timer_id order (the lock order inside the timer
-- space, so two bundles can never deadlock on each other's timers), then the schedules; answers are
-- in request order.
CREATE OR REPLACE FUNCTION queen.timers_apply_v1(p_tenant UUID, p_ops JSONB) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_now TIMESTAMPTZ := now();
  v_n INT;
  v_when TIMESTAMPTZ[];
  v_results JSONB[];
  v_op JSONB;
  v_i INT;
  v_id UUID;
  v_row queen.log_timers;
  v_key TEXT;
  v_ords INT[];
  v_ids UUID[];
  v_k INT;
  v_existing INT := 0;
  v_keyed INT := 0;
  v_horizon BIGINT;
BEGIN
  -- The shortcut for one plainly valid schedule without a timerKey and with delaySeconds (the
  -- route's common call): plpgsql's cost per call is mostly setting up each expression and function
  -- it touches, and the general path below touches a dozen. The guard only admits what every rule
  -- of timers_check_op_v1 and timers_when_v1 accepts, and the row and answer are the ones the
  -- general path makes; anything else (every refusal included) takes the general path.
  -- test/timers/fastPath.test.ts holds both paths to the same answers (SET queen.timers_fast_path = off).
  IF jsonb_typeof(p_ops) = 'array' AND current_setting('queen.timers_fast_path', true) IS DISTINCT FROM 'off' THEN
    v_op := p_ops -> 0;
    v_horizon := coalesce(nullif(current_setting('queen.timers_max_horizon_seconds', true), '')::bigint, 31536000);
    -- AND stops at a false but not at a NULL, so no term below may raise on what an earlier one let through.
    IF jsonb_array_length(p_ops) = 1 AND jsonb_typeof(v_op) = 'object'
       AND v_op -> 'op' = '"schedule"'::jsonb
       AND (v_op - '{op,queue,partition,payload,delaySeconds,timerKey}'::text[]) = '{}'::jsonb
       AND jsonb_typeof(v_op -> 'queue') = 'string' AND queen.name_ok_v1(v_op ->> 'queue')
       AND (NOT v_op ? 'partition' OR v_op -> 'partition' = 'null'::jsonb
            OR (jsonb_typeof(v_op -> 'partition') = 'string' AND queen.name_ok_v1(v_op ->> 'partition')))
       AND v_op ? 'payload'
       AND octet_length((v_op -> 'payload')::text) <= coalesce(nullif(current_setting('queen.timers_max_payload_bytes', true), '')::bigint, 65536)
       AND (NOT v_op ? 'timerKey' OR v_op -> 'timerKey' = 'null'::jsonb)
       AND NOT v_op ? 'deliverAt'
       AND jsonb_typeof(v_op -> 'delaySeconds') = 'number'
       AND (v_op ->> 'delaySeconds')::numeric BETWEEN 0 AND v_horizon
       AND coalesce(nullif(current_setting('queen.kv_max_batch', true), '')::int, 1000) >= 1 THEN
      -- Rounded to microseconds before the double cast, as in timers_when_v1 (1e-400 underflows it).
      v_when := ARRAY[date_trunc('milliseconds', v_now + make_interval(secs => round((v_op ->> 'delaySeconds')::numeric, 6)::double precision))];
      INSERT INTO queen.log_timers (tenant_id, queue, partition, payload, deliver_at, created_at)
      VALUES (p_tenant, v_op ->> 'queue',
              coalesce(CASE WHEN jsonb_typeof(v_op -> 'partition') = 'string' THEN v_op ->> 'partition' END, 'Default'),
              v_op -> 'payload', v_when[1], v_now)
      RETURNING timer_id INTO v_id;
      RETURN jsonb_build_array(jsonb_build_object('index', 0, 'op', 'schedule', 'timerId', v_id,
        'deliverAt', queen.kv_ts_v1(v_when[1]), 'created', true));
    END IF;
  END IF;
  IF jsonb_typeof(p_ops) IS DISTINCT FROM 'array' OR jsonb_array_length(p_ops) = 0 THEN
    PERFORM queen.fail_v1('timers_operations_required', 'timers must be a non-empty array of operations.', NULL);
  END IF;
  v_n := jsonb_array_length(p_ops);
  IF v_n > coalesce(nullif(current_setting('queen.kv_max_batch', true), '')::int, 1000) THEN
    PERFORM queen.fail_v1('timers_batch_too_large',
      format('At most %s timer operations in one request.', current_setting('queen.kv_max_batch', true)), NULL);
  END IF;
  v_when := array_fill(NULL::timestamptz, ARRAY[v_n]);
  v_results := array_fill(NULL::jsonb, ARRAY[v_n]);
  FOR v_i IN 0 .. v_n - 1 LOOP
    v_when[v_i + 1] := queen.timers_check_op_v1(p_ops -> v_i, v_i, v_now);
    IF p_ops -> v_i ->> 'op' <> 'schedule' THEN
      v_existing := v_existing + 1;
    ELSIF jsonb_typeof(p_ops -> v_i -> 'timerKey') = 'string' THEN
      v_keyed := v_keyed + 1;
    END IF;
  END LOOP;

  -- Existing timers, in lock order.
  IF v_existing > 0 THEN
    FOR v_op, v_i, v_id IN
      SELECT o.op, (o.ord - 1)::int, (o.op ->> 'timerId')::uuid
      FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS o(op, ord)
      WHERE o.op ->> 'op' IN ('cancel', 'reschedule')
      ORDER BY (o.op ->> 'timerId')::uuid, o.ord
    LOOP
      IF v_op ->> 'op' = 'cancel' THEN
        DELETE FROM queen.log_timers WHERE timer_id = v_id AND tenant_id = p_tenant;
        v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'cancel', 'timerId', v_id)
          || CASE WHEN FOUND THEN '{"cancelled": true}'::jsonb ELSE '{"cancelled": false, "reason": "absent"}'::jsonb END;
      ELSE
        UPDATE queen.log_timers SET deliver_at = v_when[v_i + 1]
        WHERE timer_id = v_id AND tenant_id = p_tenant;
        v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'reschedule', 'timerId', v_id)
          || CASE WHEN FOUND THEN jsonb_build_object('rescheduled', true, 'deliverAt', queen.kv_ts_v1(v_when[v_i + 1]))
                  ELSE '{"rescheduled": false, "reason": "absent"}'::jsonb END;
      END IF;
    END LOOP;
  END IF;

  -- New timers without a key: one set-based insert (ids drawn first, so each answer finds its row).
  -- Measured (bench:timers, 2026-11-29): a row-at-a-time insert loop held batches of 100 to half
  -- of pg-boss's insert rate.
  IF v_existing + v_keyed < v_n THEN
    SELECT array_agg(o.ord::int ORDER BY o.ord), array_agg(gen_random_uuid() ORDER BY o.ord)
      INTO v_ords, v_ids
    FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS o(op, ord)
    WHERE o.op ->> 'op' = 'schedule' AND jsonb_typeof(o.op -> 'timerKey') IS DISTINCT FROM 'string';
  END IF;
  IF v_ords IS NOT NULL THEN
    INSERT INTO queen.log_timers (timer_id, tenant_id, queue, partition, payload, deliver_at, created_at)
    SELECT v_ids[k], p_tenant, op ->> 'queue',
           coalesce(CASE WHEN jsonb_typeof(op -> 'partition') = 'string' THEN op ->> 'partition' END, 'Default'),
           op -> 'payload', v_when[v_ords[k]], v_now
    FROM generate_subscripts(v_ords, 1) AS k, LATERAL (SELECT p_ops -> (v_ords[k] - 1) AS op) x;
    FOR v_k IN 1 .. cardinality(v_ords) LOOP
      v_results[v_ords[v_k]] := jsonb_build_object('index', v_ords[v_k] - 1, 'op', 'schedule', 'timerId', v_ids[v_k],
        'deliverAt', queen.kv_ts_v1(v_when[v_ords[v_k]]), 'created', true);
    END LOOP;
  END IF;

  -- Keyed schedules, in key order so two bundles sharing keys take them in one order.
  IF v_keyed > 0 THEN
    FOR v_op, v_i IN
      SELECT o.op, (o.ord - 1)::int
      FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS o(op, ord)
      WHERE o.op ->> 'op' = 'schedule' AND jsonb_typeof(o.op -> 'timerKey') = 'string'
      ORDER BY (o.op ->> 'timerKey') COLLATE "C", o.ord
    LOOP
      v_key := v_op ->> 'timerKey';
      INSERT INTO queen.log_timers (tenant_id, timer_key, queue, partition, payload, deliver_at, created_at)
      VALUES (p_tenant, v_key, v_op ->> 'queue',
              coalesce(CASE WHEN jsonb_typeof(v_op -> 'partition') = 'string' THEN v_op ->> 'partition' END, 'Default'),
              v_op -> 'payload', v_when[v_i + 1], v_now)
      ON CONFLICT (tenant_id, timer_key) WHERE timer_key IS NOT NULL DO NOTHING
      RETURNING * INTO v_row;
      IF FOUND THEN
        v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'schedule', 'timerId', v_row.timer_id,
          'deliverAt', queen.kv_ts_v1(v_row.deliver_at), 'created', true);
      ELSE
        -- The key is taken: a new statement sees the winner, committed (READ COMMITTED).
        SELECT * INTO v_row FROM queen.log_timers WHERE tenant_id = p_tenant AND timer_key = v_key;
        IF NOT FOUND THEN
          -- Fired or cancelled between the conflict and this read: the key is free again, take it.
          INSERT INTO queen.log_timers (tenant_id, timer_key, queue, partition, payload, deliver_at, created_at)
          VALUES (p_tenant, v_key, v_op ->> 'queue',
                  coalesce(CASE WHEN jsonb_typeof(v_op -> 'partition') = 'string' THEN v_op ->> 'partition' END, 'Default'),
                  v_op -> 'payload', v_when[v_i + 1], v_now)
          RETURNING * INTO v_row;
          v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'schedule', 'timerId', v_row.timer_id,
            'deliverAt', queen.kv_ts_v1(v_row.deliver_at), 'created', true);
        ELSE
          v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'schedule', 'timerId', v_row.timer_id,
            'deliverAt', queen.kv_ts_v1(v_row.deliver_at), 'created', false);
        END IF;
      END IF;
    END LOOP;
  END IF;

  IF array_position(v_results, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'timers_apply_v1 left operation % unanswered', array_position(v_results, NULL) - 1;
  END IF;
  RETURN to_jsonb(v_results);
END $$;

-- Peek: never blocked by any switch (a caller must be able to find out whether a timer it can no
-- longer cancel is still pending). Reads without locking: a timer being fired right now still shows.
CREATE OR REPLACE FUNCTION queen.timers_peek_v1(p_tenant UUID, p_timer_id UUID) RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    (SELECT jsonb_build_object('found', true, 'timer', queen.timers_row_json_v1(t))
       FROM queen.log_timers t WHERE t.timer_id = p_timer_id AND t.tenant_id = p_tenant),
    '{"found": false}'::jsonb)
$$;

-- List, keyset by (deliverAt, timerId). `after` is the `next` of the previous page: the last
-- timer's deliverAt and timerId joined by a comma. Page size 1 to 1000, default 100.
CREATE OR REPLACE FUNCTION queen.timers_list_v1(p_tenant UUID, p_queue TEXT, p_after TEXT, p_limit INT) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_at TIMESTAMPTZ := '-infinity';
  v_id UUID := '00000000-0000-0000-0000-000000000000';
  v_limit INT := coalesce(p_limit, 100);
  v_rows JSONB;
  v_last queen.log_timers;
  v_count INT;
BEGIN
  IF v_limit NOT BETWEEN 1 AND 1000 THEN
    PERFORM queen.fail_v1('timers_invalid_limit', 'limit must be a whole number from 1 to 1000.', NULL);
  END IF;
  -- A filter no timer can match (a name a schedule would refuse) is a mistake to say, not an empty
  -- page to hand back silently: the pop route refuses such names too. (The route refuses U+0000.)
  IF p_queue IS NOT NULL AND NOT queen.name_ok_v1(p_queue) THEN
    PERFORM queen.fail_v1('timers_invalid_queue',
      'A queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF p_after IS NOT NULL THEN
    IF p_after !~* '^\d{4}-\d{2}-\d{2}T[0-9:.]+Z,[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
      PERFORM queen.fail_v1('timers_invalid_cursor', 'after must be the next value of a previous page.', NULL);
    END IF;
    BEGIN
      v_at := split_part(p_after, ',', 1)::timestamptz;
      v_id := split_part(p_after, ',', 2)::uuid;
    EXCEPTION WHEN OTHERS THEN
      PERFORM queen.fail_v1('timers_invalid_cursor', 'after must be the next value of a previous page.', NULL);
    END;
  END IF;
  WITH page AS (
    SELECT t FROM queen.log_timers t
    WHERE t.tenant_id = p_tenant AND (p_queue IS NULL OR t.queue = p_queue)
      AND (t.deliver_at, t.timer_id) > (v_at, v_id)
    ORDER BY t.deliver_at, t.timer_id
    LIMIT v_limit
  )
  SELECT coalesce(jsonb_agg(queen.timers_row_json_v1(t) ORDER BY (t).deliver_at, (t).timer_id), '[]'::jsonb), count(*)
    INTO v_rows, v_count FROM page;
  IF v_count = v_limit THEN
    RETURN jsonb_build_object('timers', v_rows,
      'next', (v_rows -> -1 ->> 'deliverAt') || ',' || (v_rows -> -1 ->> 'timerId'));
  END IF;
  RETURN jsonb_build_object('timers', v_rows, 'next', NULL);
END $$;

-- The fire switch, read fresh by every sweeper pass. An absent row means on; only an explicit
-- false (the jsonb value, or {"enabled": false}) pauses delivery.
CREATE OR REPLACE FUNCTION queen.timers_fire_enabled_v1() RETURNS BOOLEAN
LANGUAGE sql STABLE AS $$
  SELECT NOT EXISTS (
    SELECT 1 FROM queen.system_state
    WHERE key = 'timers_fire_enabled'
      AND (value = 'false'::jsonb OR value = '"false"'::jsonb OR value -> 'enabled' = 'false'::jsonb))
$$;

-- Fire: the cell's oldest due timers, at most p_limit, whatever their shard, each pushed into its
-- tenant's log with the transactionId 'timer:' || timer_id and deleted, in the caller's transaction,
-- set-based: one claim, the partitions locked once each, one duplicate check, one insert, one
-- last_seq update, one NOTIFY per (tenant, queue), one delete.
--
-- The claim: an ordered scan of idx_log_timers_due (deliver_at, timer_id) with FOR UPDATE SKIP
-- LOCKED, so several sweepers take disjoint batches, each the oldest due rows nobody else holds; a
-- row a cancel or a reschedule holds is left to it (the cancel wins; a rolled-back cancel leaves the
-- row for the next pass), and a row rescheduled meanwhile is re-checked on its latest version. The
-- order this gives (docs/timers.md): a batch is claimed only when every older due timer has fired,
-- or is in a batch another sweeper claimed earlier and has not committed yet, or is held by a cancel
-- or reschedule. With one sweeper the log receives the timers in exact (deliverAt, timerId) order.
-- The deliverAt floor: `deliver_at <= now()`, now() the start of this transaction, never later than
-- the clock; the message's created_at is that same now().
-- enable_bitmapscan = off: a plain index scan marks the entries of fired, deleted timers dead as it
-- passes them; a bitmap scan does not, and re-read every dead entry of a backlog on every pass.
--
-- Measured (2026-12-01, npm run bench:fire, the fire step alone on a loaded 2-core machine): moving
-- the batch with one log_push_v1 call per timer, as before, 3,400-4,700 timers a second; set-based,
-- 11,500 at a batch of 500 and 17,700 at 2,000 (bench/README.md).
DROP FUNCTION IF EXISTS queen.timers_fire_v1(SMALLINT[], INT);
CREATE OR REPLACE FUNCTION queen.timers_fire_v1(p_limit INT) RETURNS JSONB
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_claimed queen.log_timers[];
  r RECORD;
  v_ids RECORD;
  v_last BIGINT;
  v_tenants UUID[] := '{}';
  v_queues TEXT[] := '{}';
  v_parts TEXT[] := '{}';
  v_pids UUID[] := '{}';
  v_lasts BIGINT[] := '{}';
  v_hit UUID[];
  v_fired INT;
  v_stored INT;
BEGIN
  SELECT array_agg(c.t ORDER BY (c.t).deliver_at, (c.t).timer_id) INTO v_claimed FROM (
    SELECT t FROM queen.log_timers t
    WHERE t.deliver_at <= now()
    ORDER BY t.deliver_at, t.timer_id
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED) c;
  IF v_claimed IS NULL THEN
    RETURN jsonb_build_object('fired', 0, 'duplicates', 0, 'maxLateSeconds', 0);
  END IF;
  v_fired := cardinality(v_claimed);
  -- The lock order: timers (held above), then partitions in ascending (tenant, queue, partition)
  -- order, each created on first use and locked once, as queen.log_lock_partitions_v1 does for one
  -- tenant, so a pass and a transaction-wire bundle pushing to the same partitions can never wait on
  -- each other in a circle, nor two sweepers. Each timer fires into its own tenant's queue.
  FOR r IN
    SELECT DISTINCT c.tenant_id, c.queue COLLATE "C" AS queue, c.partition COLLATE "C" AS partition
    FROM unnest(v_claimed) AS c ORDER BY 1, 2, 3
  LOOP
    -- The log's own name rules, once per partition (a schedule checked them already).
    PERFORM queen.log_check_push_v1(r.queue, r.partition, NULL, NULL);
    v_ids := queen.log_ensure_partition_v1(r.tenant_id, r.queue, r.partition);
    SELECT p.last_seq INTO v_last FROM queen.partitions p WHERE p.id = v_ids.p_id FOR NO KEY UPDATE;
    v_tenants := v_tenants || r.tenant_id;
    v_queues := v_queues || r.queue;
    v_parts := v_parts || r.partition;
    v_pids := v_pids || v_ids.p_id;
    v_lasts := v_lasts || v_last;
  END LOOP;
  -- One statement: the duplicate check (a 'timer:' transactionId already in its partition: a fire
  -- that already happened, so nothing is stored twice), the messages numbered per partition after
  -- its last_seq in (deliverAt, timerId) order, each partition's last_seq moved once.
  WITH k AS (
    SELECT * FROM unnest(v_tenants, v_queues, v_parts, v_pids, v_lasts) AS k(tenant_id, queue, partition, pid, last_seq)
  ), c AS (
    SELECT k.pid, k.last_seq, t.deliver_at, t.timer_id, t.payload, 'timer:' || t.timer_id::text AS txid
    FROM unnest(v_claimed) AS t
    JOIN k ON k.tenant_id = t.tenant_id AND k.queue = t.queue AND k.partition = t.partition
  ), fresh AS (
    SELECT c.*, c.last_seq + row_number() OVER (PARTITION BY c.pid ORDER BY c.deliver_at, c.timer_id) AS seq
    FROM c
    WHERE NOT EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = c.pid AND m.transaction_id = c.txid)
  ), ins AS (
    INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
    SELECT f.pid, f.seq, f.txid, f.payload FROM fresh f ORDER BY f.pid, f.seq
    RETURNING partition_id, seq
  ), bumped AS (
    UPDATE queen.partitions p SET last_seq = n.top
    FROM (SELECT i.partition_id, max(i.seq) AS top FROM ins i GROUP BY i.partition_id) n
    WHERE p.id = n.partition_id
    RETURNING p.id
  )
  SELECT count(*)::int, array_agg(DISTINCT i.partition_id) INTO v_stored, v_hit FROM ins i;
  -- Wakes long-polling pops on commit, once per '<tenant>/<queue>' that received a message
  -- (services/api/pushSignal.ts).
  PERFORM pg_notify('queen_log', x.tenant_id::text || '/' || x.queue)
  FROM (SELECT DISTINCT k.tenant_id, k.queue FROM unnest(v_tenants, v_queues, v_pids) AS k(tenant_id, queue, pid)
        WHERE k.pid = ANY (v_hit)) x;
  DELETE FROM queen.log_timers WHERE timer_id = ANY (ARRAY(SELECT c.timer_id FROM unnest(v_claimed) AS c));
  RETURN jsonb_build_object('fired', v_fired, 'duplicates', v_fired - v_stored,
    'maxLateSeconds', extract(epoch FROM clock_timestamp() - v_claimed[1].deliver_at)::double precision);
END $$;

-- Prune: expired KV rows of one shard, at most p_limit, through idx_kv_shard_expires. SKIP LOCKED
-- so the sweeper never waits on a KV writer (a row being rewritten is not ours to delete anyway).
-- Reads never depended on this: kv_live_v1 already hides every row deleted here.
CREATE OR REPLACE FUNCTION queen.kv_prune_v1(p_shard SMALLINT, p_limit INT) RETURNS INT
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  v_n INT;
BEGIN
  DELETE FROM queen.kv WHERE ctid IN (
    SELECT ctid FROM queen.kv
    WHERE shard = p_shard AND expires_at IS NOT NULL AND expires_at < now()
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;

-- One sweeper pass, one transaction. Firing is cell-wide: the oldest due timers of the cell, at most
-- p_fire_limit (queen.timers_fire_v1), unless the switch says no (read here, fresh). The shards are
-- for the rest: when p_prune, claim up to p_shard_count shards not yet swept since p_since (the start
-- of the caller's cycle; NULL = this instant, the first pass of a cycle), least recently swept
-- first, with FOR UPDATE SKIP LOCKED, held until commit (two sweepers never work one shard at once,
-- and a dead sweeper's claim ends with its connection), prune their expired keys and mark them
-- swept. A pass that claimed no shard and did not fill its fire batch ends the caller's cycle; it
-- answers when the cell's next future timer falls due, so the caller sleeps no longer than that.
-- claimedAtUs and finishedAtUs (epoch microseconds) are read from the server's clock inside the claim,
-- so a test can check that no two passes over one shard ever overlapped.
CREATE OR REPLACE FUNCTION queen.sweeper_pass_v1(
  p_since TIMESTAMPTZ, p_worker TEXT, p_shard_count INT, p_fire_limit INT, p_prune_limit INT, p_prune BOOLEAN)
RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_since TIMESTAMPTZ := coalesce(p_since, now());
  v_shards SMALLINT[];
  v_claimed_at TIMESTAMPTZ;
  v_fire_on BOOLEAN := queen.timers_fire_enabled_v1();
  v_fire JSONB := '{"fired": 0, "duplicates": 0, "maxLateSeconds": 0}';
  v_fired INT;
  v_pruned INT := 0;
  v_prune_full BOOLEAN := false;
  v_fired_at TIMESTAMPTZ;
  v_next TIMESTAMPTZ;
  v_n INT;
  v_s SMALLINT;
BEGIN
  IF p_prune THEN
    SELECT array_agg(c.shard ORDER BY c.shard) INTO v_shards FROM (
      SELECT s.shard FROM queen.sweeper_shards s
      WHERE s.last_swept_at IS NULL OR s.last_swept_at < v_since
      ORDER BY s.last_swept_at NULLS FIRST, s.shard
      LIMIT p_shard_count
      FOR UPDATE SKIP LOCKED) c;
  END IF;
  v_claimed_at := clock_timestamp();
  IF v_fire_on THEN
    v_fire := queen.timers_fire_v1(p_fire_limit);
  END IF;
  v_fired := (v_fire ->> 'fired')::int;
  v_fired_at := clock_timestamp();
  IF v_shards IS NOT NULL THEN
    FOREACH v_s IN ARRAY v_shards LOOP
      v_n := queen.kv_prune_v1(v_s, p_prune_limit);
      v_pruned := v_pruned + v_n;
      v_prune_full := v_prune_full OR v_n >= p_prune_limit;
    END LOOP;
    UPDATE queen.sweeper_shards SET last_swept_at = now(), swept_by = p_worker WHERE shard = ANY (v_shards);
  END IF;
  IF v_shards IS NULL AND NOT (v_fire_on AND v_fired >= p_fire_limit) THEN
    -- The end of the caller's cycle: when the cell's next future timer falls due (one probe of
    -- idx_log_timers_due).
    SELECT t.deliver_at INTO v_next FROM queen.log_timers t WHERE t.deliver_at > now()
      ORDER BY t.deliver_at LIMIT 1;
  END IF;
  -- A pass that fired and pruned nothing wrote only its own bookkeeping: losing that commit in a
  -- crash loses nothing, so it does not wait for the WAL flush. At 1,000 timers a second the sweeper
  -- wakes every few tens of ms and most passes are empty; each waiting for an fsync was measured
  -- (bench:timers, 2026-11-29) to cost CPU and fire lag on a 2-core machine. A pass that fired keeps
  -- the synchronous commit: a message a consumer has seen must survive a crash.
  IF v_fired = 0 AND v_pruned = 0 THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  RETURN jsonb_build_object(
    'since', v_since, 'shards', coalesce(to_jsonb(v_shards), '[]'::jsonb), 'fireEnabled', v_fire_on,
    'fired', v_fired, 'duplicates', (v_fire ->> 'duplicates')::int,
    'maxLateSeconds', (v_fire ->> 'maxLateSeconds')::double precision,
    'fireFull', v_fire_on AND v_fired >= p_fire_limit,
    'pruned', v_pruned, 'pruneFull', v_prune_full,
    'fireSeconds', extract(epoch FROM v_fired_at - v_claimed_at)::double precision,
    'pruneSeconds', extract(epoch FROM clock_timestamp() - v_fired_at)::double precision,
    'claimedAtUs', (extract(epoch FROM v_claimed_at) * 1000000)::bigint,
    'finishedAtUs', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
    'nextDueInMs', (extract(epoch FROM v_next - clock_timestamp()) * 1000)::double precision);
END $$;

-- What the sweeper's gauges show. One probe of idx_log_timers_due for the oldest due timer, per-shard
-- probes of the KV's shard-led index (64 short index scans) rather than one scan of everything; the
-- counts stop at a million, past which the exact number no longer changes what an operator does.
CREATE OR REPLACE FUNCTION queen.sweeper_gauges_v1() RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'timersDue', (SELECT count(*) FROM (SELECT 1 FROM queen.log_timers WHERE deliver_at <= now() LIMIT 1000000) d),
    'timersOldestLateSeconds', coalesce(extract(epoch FROM now() - (
        SELECT t.deliver_at FROM queen.log_timers t WHERE t.deliver_at <= now()
        ORDER BY t.deliver_at LIMIT 1))::double precision, 0),
    'kvExpiredNotPruned', (SELECT count(*) FROM (SELECT 1 FROM queen.kv WHERE expires_at IS NOT NULL AND expires_at < now() LIMIT 1000000) e),
    'kvExpiryLagSeconds', coalesce(extract(epoch FROM now() - (
        SELECT min(o.expires_at) FROM generate_series(0, 63) AS g(s),
          LATERAL (SELECT k.expires_at FROM queen.kv k WHERE k.shard = g.s::smallint AND k.expires_at IS NOT NULL
                   ORDER BY k.expires_at LIMIT 1) o
        WHERE o.expires_at < now()))::double precision, 0))
$$;

-- The usage rollup: overwrite queen.kv_usage per tenant with a direct count. rows/bytes are the
-- tenant's live keys (an expired row is invisible to it and is the cell's to prune), bytes being
-- key, namespace and stored value sizes; timers/timer_bytes its pending timers and their payloads.
-- Last writer wins on computed_at; a tenant with nothing left is written as zeros, not left stale.
-- computed_at is now(), the start of this transaction, which is never later than the snapshot the
-- counts are read from: an API worker retires a write of its own from its local delta once the
-- write's commit was acknowledged before computed_at, and such a write is certainly counted here.
-- Not clock_timestamp(): read after the snapshot, it would retire writes these counts never saw.
CREATE OR REPLACE FUNCTION queen.kv_usage_rollup_v1() RETURNS INT
LANGUAGE plpgsql AS $$
DECLARE
  v_n INT;
BEGIN
  WITH measured AS (
    SELECT tenant_id, sum(r)::bigint AS rows, sum(b)::bigint AS bytes, sum(t)::bigint AS timers, sum(tb)::bigint AS timer_bytes
    FROM (
      SELECT k.tenant_id, count(*) AS r,
             sum(octet_length(k.namespace) + octet_length(k.key) + pg_column_size(k.value)) AS b, 0 AS t, 0 AS tb
      FROM queen.kv k WHERE queen.kv_live_v1(k.expires_at, now()) GROUP BY k.tenant_id
      UNION ALL
      SELECT t.tenant_id, 0, 0, count(*), sum(pg_column_size(t.payload))
      FROM queen.log_timers t GROUP BY t.tenant_id
      UNION ALL
      SELECT u.tenant_id, 0, 0, 0, 0 FROM queen.kv_usage u
    ) x GROUP BY tenant_id
  )
  INSERT INTO queen.kv_usage AS u (tenant_id, rows, bytes, timers, timer_bytes, computed_at)
  SELECT tenant_id, rows, bytes, timers, timer_bytes, now() FROM measured
  ON CONFLICT (tenant_id) DO UPDATE
    SET rows = EXCLUDED.rows, bytes = EXCLUDED.bytes, timers = EXCLUDED.timers,
        timer_bytes = EXCLUDED.timer_bytes, computed_at = EXCLUDED.computed_at
    WHERE u.computed_at <= EXCLUDED.computed_at;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;
