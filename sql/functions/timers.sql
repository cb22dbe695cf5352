-- The timer rules, written once: schedule, cancel, reschedule, peek and list. The routes and
-- the transaction wire's `timers` array only carry JSON text in and out of these functions; the
-- sweeper's passes (firing the due timers) are in sweeper.sql.
--
-- Refusals raise SQLSTATE QK400 with DETAIL {"code", "index"} through queen.fail_v1, like the KV and the log.
-- Limits are queen.limit_v1's (queen.sql): the pools' session settings, or their defaults.
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

CREATE OR REPLACE FUNCTION queen.timers_row_json_v1(r queen.log_timers) RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'timerId', r.timer_id, 'queue', r.queue, 'partition', r.partition,
    'deliverAt', queen.ts_v1(r.deliver_at), 'payload', r.payload,
    'createdAt', queen.ts_v1(r.created_at))
    || CASE WHEN r.timer_key IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('timerKey', r.timer_key) END
$$;
CREATE OR REPLACE FUNCTION queen.timers_uuid_v1(p_value JSONB, p_index INT) RETURNS UUID
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF jsonb_typeof(p_value) IS DISTINCT FROM 'string' OR NOT queen.uuid_ok_v1(p_value #>> '{}') THEN
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
  v_horizon BIGINT := queen.limit_v1('timers_max_horizon_seconds');
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
    -- Rounded to microseconds (the timestamp's own precision) first: a tiny positive delay such as
    -- 1e-400 is a valid numeric but underflows double precision, which raised 22003 (a 400
    -- invalid_json echoing the whole number) instead of meaning "now". A delay past the horizon is
    -- never made an interval (a huge one overflows it): it is refused below, as a deliverAt is.
    v_at := CASE WHEN v_delay > v_horizon THEN 'infinity'
                 ELSE p_now + make_interval(secs => round(v_delay, 6)::double precision) END;
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
  v_max_payload BIGINT := queen.limit_v1('timers_max_payload_bytes');
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
    v_horizon := queen.limit_v1('timers_max_horizon_seconds');
    -- AND stops at a false but not at a NULL, so no term below may raise on what an earlier one let through.
    IF jsonb_array_length(p_ops) = 1 AND jsonb_typeof(v_op) = 'object'
       AND v_op -> 'op' = '"schedule"'::jsonb
       AND (v_op - '{op,queue,partition,payload,delaySeconds,timerKey}'::text[]) = '{}'::jsonb
       AND jsonb_typeof(v_op -> 'queue') = 'string' AND queen.name_ok_v1(v_op ->> 'queue')
       AND (NOT v_op ? 'partition' OR v_op -> 'partition' = 'null'::jsonb
            OR (jsonb_typeof(v_op -> 'partition') = 'string' AND queen.name_ok_v1(v_op ->> 'partition')))
       AND v_op ? 'payload'
       AND octet_length((v_op -> 'payload')::text) <= queen.limit_v1('timers_max_payload_bytes')
       AND (NOT v_op ? 'timerKey' OR v_op -> 'timerKey' = 'null'::jsonb)
       AND NOT v_op ? 'deliverAt'
       AND jsonb_typeof(v_op -> 'delaySeconds') = 'number'
       AND (v_op ->> 'delaySeconds')::numeric BETWEEN 0 AND v_horizon
       AND queen.limit_v1('kv_max_batch') >= 1 THEN
      -- Rounded to microseconds before the double cast, as in timers_when_v1 (1e-400 underflows it).
      v_when := ARRAY[date_trunc('milliseconds', v_now + make_interval(secs => round((v_op ->> 'delaySeconds')::numeric, 6)::double precision))];
      INSERT INTO queen.log_timers (tenant_id, queue, partition, payload, deliver_at, created_at)
      VALUES (p_tenant, v_op ->> 'queue',
              coalesce(CASE WHEN jsonb_typeof(v_op -> 'partition') = 'string' THEN v_op ->> 'partition' END, 'Default'),
              v_op -> 'payload', v_when[1], v_now)
      RETURNING timer_id INTO v_id;
      RETURN jsonb_build_array(jsonb_build_object('index', 0, 'op', 'schedule', 'timerId', v_id,
        'deliverAt', queen.ts_v1(v_when[1]), 'created', true));
    END IF;
  END IF;
  v_n := queen.array_length_v1(p_ops, 'timers_operations_required', 'timers must be a non-empty array of operations.', NULL,
    queen.limit_v1('kv_max_batch'), 'timers_batch_too_large', 'At most %2$s timer operations in one request.');
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
          || CASE WHEN FOUND THEN jsonb_build_object('rescheduled', true, 'deliverAt', queen.ts_v1(v_when[v_i + 1]))
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
        'deliverAt', queen.ts_v1(v_when[v_ords[v_k]]), 'created', true);
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
          'deliverAt', queen.ts_v1(v_row.deliver_at), 'created', true);
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
            'deliverAt', queen.ts_v1(v_row.deliver_at), 'created', true);
        ELSE
          v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'schedule', 'timerId', v_row.timer_id,
            'deliverAt', queen.ts_v1(v_row.deliver_at), 'created', false);
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

-- A timer list's keyset cursor, `<deliverAt ISO>,<timerId>` as a page's `next` gives it: where the
-- page starts (before every timer when p_after is NULL). Anything else is 400 timers_invalid_cursor.
-- One parser for the client's timer list and the operator's (sql/functions/operator.sql).
CREATE OR REPLACE FUNCTION queen.timers_cursor_v1(p_after TEXT, OUT at TIMESTAMPTZ, OUT id UUID)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  at := '-infinity';
  id := '00000000-0000-0000-0000-000000000000';
  IF p_after IS NOT NULL THEN
    IF p_after !~* ('^\d{4}-\d{2}-\d{2}T[0-9:.]+Z,' || queen.uuid_pattern_v1() || '$') THEN
      PERFORM queen.fail_v1('timers_invalid_cursor', 'after must be the next value of a previous page.', NULL);
    END IF;
    BEGIN
      at := split_part(p_after, ',', 1)::timestamptz;
      id := split_part(p_after, ',', 2)::uuid;
    EXCEPTION WHEN OTHERS THEN
      PERFORM queen.fail_v1('timers_invalid_cursor', 'after must be the next value of a previous page.', NULL);
    END;
  END IF;
END $$;

-- List, keyset by (deliverAt, timerId). `after` is the `next` of the previous page: the last
-- timer's deliverAt and timerId joined by a comma. Page size 1 to 1000, default 100.
CREATE OR REPLACE FUNCTION queen.timers_list_v1(p_tenant UUID, p_queue TEXT, p_after TEXT, p_limit INT) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_at TIMESTAMPTZ;
  v_id UUID;
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
  IF p_queue IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_queue, 'timers_invalid_queue', 'A queue name');
  END IF;
  SELECT c.at, c.id INTO v_at, v_id FROM queen.timers_cursor_v1(p_after) c;
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

-- Encryption at rest of timers (docs/security.md#encryption-at-rest). A schedule into a queue with
-- encryptionEnabled keeps only the sealed text the API wrote (queen.sealed_timers marks the timer),
-- as a push to that queue does; the fire copies the sealed text into the message and marks it
-- (queen.timers_fire_v3), and peek and list mark the timer "sealed": true for the API to open.

-- A schedule that carries a payload to a named queue: what is sealed when that queue is encrypted.
CREATE OR REPLACE FUNCTION queen.timers_sealable_v1(p_op JSONB) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE AS $$
  SELECT jsonb_typeof(p_op) = 'object' AND p_op -> 'op' = '"schedule"'::jsonb
     AND jsonb_typeof(p_op -> 'queue') = 'string' AND p_op ? 'payload'
$$;

-- What the API seals after a QK428: the payload (as jsonb text: numbers exact) of each schedule to
-- one of p_queues, NULL for the other operations, aligned with them.
CREATE OR REPLACE FUNCTION queen.timers_seal_texts_v1(p_ops JSONB, p_queues TEXT[]) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_agg(CASE WHEN queen.timers_sealable_v1(e) AND e ->> 'queue' = ANY (p_queues)
                                 THEN (e -> 'payload')::text END ORDER BY k), '{}')
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_ops) = 'array' THEN p_ops ELSE '[]' END) WITH ORDINALITY AS t (e, k)
$$;

-- A cancelled timer's row of queen.sealed_timers goes with it (no foreign key: migration 054 says
-- why). Nothing to do, and no statement run, for a request without a cancel.
CREATE OR REPLACE FUNCTION queen.timers_unseal_cancelled_v1(p_ops JSONB, p_results JSONB) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  IF jsonb_typeof(p_ops) = 'array' AND jsonb_path_exists(p_ops, '$[*] ? (@.op == "cancel")') THEN
    DELETE FROM queen.sealed_timers s
     WHERE s.timer_id IN (SELECT (r ->> 'timerId')::uuid FROM jsonb_array_elements(p_results) r
                           WHERE r -> 'cancelled' = 'true'::jsonb);
  END IF;
END $$;

-- The timer routes' and the transaction wire's entry since encrypted timers: queen.timers_apply_v1
-- with the sealing rule of a push (queen.log_check_sealed_v1). `p_sealed` is aligned with the
-- operations: the sealed text of a schedule's payload, or null. A request none of whose schedules
-- names an encrypted queue of the tenant is v1's after one probe (none at all on a cell whose queues
-- have no options rows). Otherwise every operation is checked first, on the payload as given (so the
-- refusals, QUEEN_TIMERS_MAX_PAYLOAD_BYTES included, are those of the plaintext); then a schedule to
-- an encrypted queue without its sealed text raises QK428 with DETAIL {"queues": [...]} before
-- anything is written, and the API seals those payloads (queen.timers_seal_texts_v1) and sends the
-- request again. With them, v1 stores the sealed text in place of each such payload, and the timers
-- it created from them are marked in queen.sealed_timers (a timerKey that named an existing timer
-- stored nothing and marks nothing). A queue turned encrypted after a timer was scheduled does not
-- reach back: that timer stays as it was stored, in clear, and fires so.
CREATE OR REPLACE FUNCTION queen.timers_apply_v2(p_tenant UUID, p_ops JSONB, p_sealed JSONB DEFAULT NULL) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_encrypted TEXT[];
  v_ops JSONB;
  v_out JSONB;
  v_ceiling TEXT;
  v_now TIMESTAMPTZ := now();
  v_i INT;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF jsonb_typeof(p_ops) = 'array' THEN
    SELECT array_agg(q.name ORDER BY q.name) INTO v_encrypted
      FROM queen.queues q JOIN queen.queue_options o ON o.queue_id = q.id
     WHERE q.tenant_id = p_tenant AND o.encryption_enabled
       AND q.name = ANY (ARRAY(SELECT DISTINCT e ->> 'queue' FROM jsonb_array_elements(p_ops) e WHERE queen.timers_sealable_v1(e)));
  END IF;
  IF v_encrypted IS NULL THEN
    v_out := queen.timers_apply_v1(p_tenant, p_ops);
    PERFORM queen.timers_unseal_cancelled_v1(p_ops, v_out);
    RETURN v_out;
  END IF;
  -- v1's checks, in its order, on the request as given: a bad request is refused before any seal.
  PERFORM queen.array_length_v1(p_ops, 'timers_operations_required', 'timers must be a non-empty array of operations.', NULL,
    queen.limit_v1('kv_max_batch'), 'timers_batch_too_large', 'At most %2$s timer operations in one request.');
  FOR v_i IN 0 .. jsonb_array_length(p_ops) - 1 LOOP
    PERFORM queen.timers_check_op_v1(p_ops -> v_i, v_i, v_now);
  END LOOP;
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS t (e, k)
              WHERE queen.timers_sealable_v1(e) AND e ->> 'queue' = ANY (v_encrypted)
                AND jsonb_typeof(p_sealed -> (k::int - 1)) IS DISTINCT FROM 'string') THEN
    RAISE EXCEPTION USING ERRCODE = 'QK428', MESSAGE = 'sealing_required', DETAIL = jsonb_build_object('queues', v_encrypted)::text;
  END IF;
  SELECT jsonb_agg(CASE WHEN queen.timers_sealable_v1(e) AND e ->> 'queue' = ANY (v_encrypted)
                        THEN e || jsonb_build_object('payload', p_sealed -> (k::int - 1)) ELSE e END ORDER BY k)
    INTO v_ops FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS t (e, k);
  -- The payload ceiling was held to the plaintext above; the sealed text is longer (base64 and its
  -- header), so v1's own check of it is lifted for this call alone (a transaction-local setting,
  -- put back after; undone with the transaction or the subtransaction if v1 raises).
  v_ceiling := coalesce(current_setting('queen.timers_max_payload_bytes', true), '');
  PERFORM set_config('queen.timers_max_payload_bytes', '9223372036854775807', true);
  v_out := queen.timers_apply_v1(p_tenant, v_ops);
  PERFORM set_config('queen.timers_max_payload_bytes', v_ceiling, true);
  INSERT INTO queen.sealed_timers (timer_id)
  SELECT (v_out -> (k::int - 1) ->> 'timerId')::uuid FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS t (e, k)
   WHERE queen.timers_sealable_v1(e) AND e ->> 'queue' = ANY (v_encrypted)
     AND v_out -> (k::int - 1) -> 'created' = 'true'::jsonb
  ON CONFLICT DO NOTHING;
  PERFORM queen.timers_unseal_cancelled_v1(p_ops, v_out);
  RETURN v_out;
END $$;

-- Peek and list as v1, each sealed timer (queen.sealed_timers) marked "sealed": true for the API
-- to open (its payload is the sealed text). Each reads the marks in the same snapshot as the timers.
CREATE OR REPLACE FUNCTION queen.timers_mark_sealed_v1(p_timer JSONB) RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN EXISTS (SELECT 1 FROM queen.sealed_timers s WHERE s.timer_id = (p_timer ->> 'timerId')::uuid)
              THEN p_timer || '{"sealed": true}'::jsonb ELSE p_timer END
$$;
CREATE OR REPLACE FUNCTION queen.timers_peek_v2(p_tenant UUID, p_timer_id UUID) RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT coalesce(queen.tenant_gate_v1(p_tenant),
                  CASE WHEN p.r ? 'timer' THEN jsonb_set(p.r, '{timer}', queen.timers_mark_sealed_v1(p.r -> 'timer')) ELSE p.r END)
    FROM (SELECT queen.timers_peek_v1(p_tenant, p_timer_id) AS r) p
$$;
CREATE OR REPLACE FUNCTION queen.timers_list_v2(p_tenant UUID, p_queue TEXT, p_after TEXT, p_limit INT) RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT coalesce(queen.tenant_gate_v1(p_tenant),
                  jsonb_set(l.r, '{timers}', (SELECT coalesce(jsonb_agg(queen.timers_mark_sealed_v1(e) ORDER BY k), '[]'::jsonb)
                                                FROM jsonb_array_elements(l.r -> 'timers') WITH ORDINALITY AS t (e, k))))
    FROM (SELECT queen.timers_list_v1(p_tenant, p_queue, p_after, p_limit) AS r OFFSET 0) l
$$;

-- The trace context of the request that scheduled timers (p_trace: its sampled span,
-- {"traceId": 32 hex digits, "spanId": 16}, as queen.log_stamp_traces_v1 takes it; NULL: none),
-- stored on each timer a schedule of p_results created (a timerKey that named an existing timer
-- keeps that timer's). The fire (queen.timers_fire_v3) copies it onto the message the timer
-- becomes, so the consumer continues the schedule's trace. Answers p_results as they are.
CREATE OR REPLACE FUNCTION queen.timers_stamp_traces_v1(p_results JSONB, p_trace JSONB) RETURNS JSONB
LANGUAGE plpgsql AS $$
BEGIN
  IF p_trace IS NOT NULL AND jsonb_typeof(p_trace) = 'object' AND jsonb_typeof(p_results) = 'array' THEN
    UPDATE queen.log_timers t SET trace_id = (p_trace ->> 'traceId')::uuid, span_id = decode(p_trace ->> 'spanId', 'hex')
      FROM jsonb_array_elements(p_results) e
     WHERE e -> 'created' = 'true'::jsonb AND t.timer_id = (e ->> 'timerId')::uuid;
  END IF;
  RETURN p_results;
END $$;
