-- The transaction wire's operations, queue administration and lease extension.

-- Creates and locks, in ascending (queue, partition) order, every partition of the tenant these
-- (validated) items push to. (The fire, pushing for several tenants, calls it tenant by tenant in
-- ascending tenant order: one order, restricted to any one tenant the same.)
CREATE OR REPLACE FUNCTION queen.log_lock_partitions_v1(p_tenant UUID, p_items JSONB) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
  r RECORD;
BEGIN
  FOR r IN
    SELECT DISTINCT it->>'queue' COLLATE "C" AS queue, coalesce(it->>'partition', 'Default') COLLATE "C" AS partition
      FROM jsonb_array_elements(p_items) it ORDER BY 1, 2
  LOOP
    PERFORM queen.log_lock_partition_v1(p_tenant, r.queue, r.partition);
  END LOOP;
END $$;

-- A whole-number option of a queue from p_lo to p_hi, as an int; NULL when absent; refused with
-- p_code and p_message otherwise. Through numeric: 30.0 is the whole number 30, and '30.0'::int
-- would raise.
CREATE OR REPLACE FUNCTION queen.log_whole_option_v1(
  p_options JSONB, p_key TEXT, p_lo INT, p_hi INT, p_code TEXT, p_message TEXT
) RETURNS INT LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF NOT p_options ? p_key THEN
    RETURN NULL;
  END IF;
  IF jsonb_typeof(p_options->p_key) <> 'number' OR (p_options->>p_key)::numeric NOT BETWEEN p_lo AND p_hi
     OR (p_options->>p_key)::numeric <> trunc((p_options->>p_key)::numeric) THEN
    PERFORM queen.fail_v1(p_code, p_message, NULL);
  END IF;
  RETURN (p_options->>p_key)::numeric::int;
END $$;

-- The queue a configure body names (queen.log_configure_v1 and v2), refused unless the body is an
-- object and its queue a string that is a queue name.
CREATE OR REPLACE FUNCTION queen.log_configure_queue_v1(p_body JSONB) RETURNS TEXT
LANGUAGE plpgsql AS $$
DECLARE
  v_queue TEXT := queen.log_str_v1(p_body->'queue');
BEGIN
  IF jsonb_typeof(p_body) <> 'object' THEN
    PERFORM queen.fail_v1('invalid_json', 'The request body must be a JSON object.', NULL);
  END IF;
  IF v_queue IS NULL THEN
    PERFORM queen.fail_v1('log_queue_required', 'queue is required (a string).', NULL);
  END IF;
  PERFORM queen.check_name_v1(v_queue, 'log_invalid_queue', 'A queue name');
  RETURN v_queue;
END $$;

-- Configure's options the cell does not implement (every key of p_options outside p_implemented,
-- in key order): accepted only at their value in p_neutral, the one meaning what the cell always
-- does; any other value, and a key p_neutral lacks, is 400 unsupported naming it.
CREATE OR REPLACE FUNCTION queen.log_check_neutral_options_v1(p_options JSONB, p_implemented TEXT[], p_neutral JSONB) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
  v_key TEXT;
BEGIN
  FOR v_key IN SELECT k FROM jsonb_object_keys(p_options) k ORDER BY k LOOP
    CONTINUE WHEN v_key = ANY (p_implemented);
    IF NOT p_neutral ? v_key THEN
      PERFORM queen.fail_v1('unsupported', format('options.%s: the cell does not know this option.', v_key), NULL);
    END IF;
    IF p_options->v_key IS DISTINCT FROM p_neutral->v_key AND NOT (jsonb_typeof(p_options->v_key) = 'number'
       AND jsonb_typeof(p_neutral->v_key) = 'number' AND (p_options->>v_key)::numeric = (p_neutral->>v_key)::numeric) THEN
      PERFORM queen.fail_v1('unsupported', format('options.%s: the cell implements only %s (what it always does); it does not implement other values.',
        v_key, p_neutral->v_key), NULL);
    END IF;
  END LOOP;
END $$;

-- Configure's whole-number options, one row each: its bounds, and the code and sentence of its
-- refusal. queen.log_whole_options_v1 checks the keys a caller names, in the order it names them.
CREATE OR REPLACE FUNCTION queen.log_option_bounds_v1() RETURNS TABLE (key TEXT, lo INT, hi INT, code TEXT, message TEXT)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  VALUES ('leaseTime', 1, 86400, 'log_invalid_lease_time', 'options.leaseTime is a whole number of seconds from 1 to 86400.'),
    ('retryLimit', 0, 1000, 'log_invalid_retry_limit', 'options.retryLimit is a whole number from 0 to 1000.'),
    ('delayedProcessing', 0, 86400, 'log_invalid_options', 'options.delayedProcessing is a whole number of seconds from 0 to 86400.'),
    ('windowBuffer', 0, 86400, 'log_invalid_options', 'options.windowBuffer is a whole number of seconds from 0 to 86400.'),
    ('retryDelay', 0, 86400000, 'log_invalid_options', 'options.retryDelay is a whole number of milliseconds from 0 to 86400000.'),
    ('retryDelayMax', 0, 86400000, 'log_invalid_options', 'options.retryDelayMax is a whole number of milliseconds from 0 to 86400000.'),
    ('maxSize', 0, 1000000000, 'log_invalid_options', 'options.maxSize is a whole number of messages from 0 (no cap) to 1000000000.'),
    ('priority', -1000000, 1000000, 'log_invalid_options', 'options.priority is a whole number from -1000000 to 1000000.'),
    -- The retention options (sql/functions/retention.sql says what each removes): whole seconds
    -- from 0 (not set) to ten years.
    ('retentionSeconds', 0, 315360000, 'log_invalid_options',
     'options.retentionSeconds is a whole number of seconds from 0 (the cell''s default retention) to 315360000.'),
    ('completedRetentionSeconds', 0, 315360000, 'log_invalid_options',
     'options.completedRetentionSeconds is a whole number of seconds from 0 (not set) to 315360000.'),
    ('maxWaitTimeSeconds', 0, 315360000, 'log_invalid_options', 'options.maxWaitTimeSeconds is a whole number of seconds from 0 (not set) to 315360000.'),
    ('ttl', 0, 315360000, 'log_invalid_options', 'options.ttl is a whole number of seconds from 0 (not set) to 315360000.')
$$;

-- The whole-number options p_keys names (rows of queen.log_option_bounds_v1), checked in p_keys'
-- order (the first bad one is refused); each one's value, NULL for one not sent, in that order.
CREATE OR REPLACE FUNCTION queen.log_whole_options_v1(p_options JSONB, p_keys TEXT[]) RETURNS INT[]
LANGUAGE plpgsql STABLE AS $$
DECLARE
  b RECORD;
  v_out INT[] := '{}';
BEGIN
  FOR b IN SELECT o.* FROM unnest(p_keys) WITH ORDINALITY AS k (key, n) JOIN queen.log_option_bounds_v1() o ON o.key = k.key ORDER BY k.n LOOP
    v_out := v_out || queen.log_whole_option_v1(p_options, b.key, b.lo, b.hi, b.code, b.message);
  END LOOP;
  RETURN v_out;
END $$;

-- Configure's options kept in queen.queues and queen.queue_delays, checked in this order; NULL for
-- one not sent.
CREATE OR REPLACE FUNCTION queen.log_queue_timing_v1(p_options JSONB,
  OUT lease_time INT, OUT retry_limit INT, OUT delayed_processing INT, OUT window_buffer INT)
LANGUAGE plpgsql AS $$
DECLARE
  v INT[] := queen.log_whole_options_v1(p_options, ARRAY['leaseTime', 'retryLimit', 'delayedProcessing', 'windowBuffer']);
BEGIN
  SELECT v[1], v[2], v[3], v[4] INTO lease_time, retry_limit, delayed_processing, window_buffer;
END $$;

-- Creates the queue, or updates it, with those options (NULL keeps a value: its default on a new
-- queue), and answers what configure's answer says of them: {queueId, queue, options: {leaseTime,
-- retryLimit, delayedProcessing, windowBuffer}}.
CREATE OR REPLACE FUNCTION queen.log_store_queue_v1(p_tenant UUID, p_queue TEXT, p_lease INT, p_retry INT, p_delay INT, p_window INT)
RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_row queen.queues;
  v_delays queen.queue_delays;
BEGIN
  INSERT INTO queen.queues AS q (tenant_id, name, lease_time, retry_limit)
  VALUES (p_tenant, p_queue, coalesce(p_lease, 300), coalesce(p_retry, 3))
  ON CONFLICT (tenant_id, name) DO UPDATE SET lease_time = coalesce(p_lease, q.lease_time),
                                   retry_limit = coalesce(p_retry, q.retry_limit), updated_at = now()
  RETURNING * INTO v_row;
  IF p_delay IS NOT NULL OR p_window IS NOT NULL THEN
    INSERT INTO queen.queue_delays AS d (queue_id, delayed_processing, window_buffer)
    VALUES (v_row.id, coalesce(p_delay, 0), coalesce(p_window, 0))
    ON CONFLICT (queue_id) DO UPDATE SET delayed_processing = coalesce(p_delay, d.delayed_processing),
                                         window_buffer = coalesce(p_window, d.window_buffer)
    RETURNING * INTO v_delays;
  ELSE
    SELECT * INTO v_delays FROM queen.queue_delays d WHERE d.queue_id = v_row.id;
  END IF;
  RETURN jsonb_build_object('queueId', v_row.id, 'queue', v_row.name,
    'options', jsonb_build_object('leaseTime', v_row.lease_time, 'retryLimit', v_row.retry_limit,
      'delayedProcessing', coalesce(v_delays.delayed_processing, 0), 'windowBuffer', coalesce(v_delays.window_buffer, 0)));
END $$;

-- POST /api/v1/configure: {queue, namespace?, task?, options: {...}} as Queen's client sends it.
-- Creates the queue when new; an omitted option keeps its current value (its default on a new queue).
-- The options the cell implements: leaseTime, retryLimit, delayedProcessing, windowBuffer (the last
-- two in queen.queue_delays, read by the pop). Queen's other options are accepted only at
-- the value that means what the cell does (priority 0, no size cap, no
-- retention, no TTL, no encryption, immediate redelivery, dead letter after retryLimit), so a client
-- sending its defaults works; any other value, and any unknown key, is 400 unsupported naming it,
-- never a success that behaves differently. The answer is Queen's ({configured, queueId, queue,
-- namespace, task, options: every key with its effective value}) with the cell's `ok`.
CREATE OR REPLACE FUNCTION queen.log_configure_v1(p_tenant UUID, p_body JSONB) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_queue TEXT;
  v_options JSONB := coalesce(nullif(p_body->'options', 'null'::jsonb), '{}'::jsonb);
  -- Queen's options at the value meaning what the cell does.
  v_neutral JSONB := '{"priority": 0, "delayedProcessing": 0, "windowBuffer": 0, "maxSize": 0, "ttl": 0,
    "retryDelay": 0, "retentionSeconds": 0, "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0,
    "retentionEnabled": false, "encryptionEnabled": false, "deadLetterQueue": true, "dlqAfterMaxRetries": true}';
  v_key TEXT;
  v_timing RECORD;
  v_stored JSONB;
BEGIN
  v_queue := queen.log_configure_queue_v1(p_body);
  IF jsonb_typeof(v_options) <> 'object' THEN
    PERFORM queen.fail_v1('log_invalid_options', 'options must be an object {leaseTime?, retryLimit?}.', NULL);
  END IF;
  FOREACH v_key IN ARRAY ARRAY['namespace', 'task'] LOOP
    IF coalesce(p_body->>v_key, '') <> '' THEN
      PERFORM queen.fail_v1('unsupported', format('%s: the cell has no queue %ss (nor pop by them); leave it out or null.', v_key, v_key), NULL);
    END IF;
  END LOOP;
  PERFORM queen.log_check_neutral_options_v1(v_options, ARRAY['leaseTime', 'retryLimit', 'delayedProcessing', 'windowBuffer'], v_neutral);
  v_timing := queen.log_queue_timing_v1(v_options);
  v_stored := queen.log_store_queue_v1(p_tenant, v_queue, v_timing.lease_time, v_timing.retry_limit,
    v_timing.delayed_processing, v_timing.window_buffer);
  RETURN jsonb_build_object('ok', true, 'configured', true, 'namespace', '', 'task', '',
    'options', v_neutral || (v_stored->'options')) || (v_stored - 'options');
END $$;

-- Locks, in ascending (partition, group) order, the partition_consumers rows of the tenant's queues
-- these normalized acks touch, so the acks of one call never wait on another call's in a circle
-- (and never on another tenant's rows: a partitionId of another tenant is not even locked). A
-- single ack is left to its step, which locks the one row after the same tenant check.
-- (plpgsql, not sql: a sql function's body is analysed at CREATE, which would take a lock on the
-- table at every boot.)
CREATE OR REPLACE FUNCTION queen.log_lock_consumers_v1(p_tenant UUID, p_acks JSONB[]) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
  k RECORD;
BEGIN
  -- One ack has no order to keep (the once-marker bundle, and most acks).
  IF cardinality(p_acks) < 2 THEN RETURN; END IF;
  -- One primary-key probe a row, in ascending order: a plan that stays cached. The set-based form
  -- (IN over the unnested acks) was planned afresh at every call, about 250 µs (pg_stat_statements
  -- with track_planning over npm run bench:log's bundle lane).
  FOR k IN SELECT DISTINCT (a->>'partitionId')::uuid AS pid, (a->>'consumerGroup') COLLATE "C" AS grp
             FROM unnest(p_acks) a ORDER BY 1, 2 LOOP
    PERFORM 1 FROM queen.partition_consumers c
     WHERE c.partition_id = k.pid AND c.consumer_group = k.grp
       AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                    WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
       FOR NO KEY UPDATE OF c;
  END LOOP;
END $$;

-- The transaction wire's `operations`, the partitions/messages lock space (shared/lockOrder.ts
-- runs it after KV and timers), as queen.log_apply_v1 and queen.log_apply_v2 apply them. Validates
-- every operation, locks partitions (pushes) then partition_consumers rows (acks) in ascending
-- order, then applies them in request order. A failing ack raises QK412 (everything in the bundle
-- rolls back). Answers one element per operation: {index, type: "push", items: [...]} or
-- {index, type: "ack", ...}. p_v2 is what 0.2 added (log_apply_v2): a moving tenant refused first,
-- pushes to an encrypted queue only sealed by the API (p_sealed), acks through
-- queen.log_ack_one_v2 (retryDelay), and maxSize checked after the pushes; without it (p_sealed
-- NULL), 0.1.0's log_apply_v1 as released.
CREATE OR REPLACE FUNCTION queen.log_apply_ops_v1(p_tenant UUID, p_ops JSONB, p_sealed JSONB, p_v2 BOOLEAN) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_n INT;
  v_op JSONB;
  v_type TEXT;
  -- The pushes' items, gathered as an array (appended in place) and made one jsonb once: a jsonb
  -- grown by || is copied whole at every item, which made a bundle quadratic in its items (8,000
  -- items took 16 s, 20,000 over a minute, holding every partition lock the while).
  v_items JSONB[] := '{}';
  v_acks JSONB[] := '{}';
  v_norm JSONB[] := '{}';
  v_out JSONB[] := '{}';
  v_item JSONB;
  v_queues TEXT[];
  v_pushed JSONB;
  v_slice JSONB;
  v_at INT := 0;
  j INT;
  i INT;
BEGIN
  IF p_v2 THEN
    PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  END IF;
  IF p_ops IS NULL OR jsonb_typeof(p_ops) = 'null' THEN RETURN '[]'::jsonb; END IF;
  IF jsonb_typeof(p_ops) <> 'array' THEN
    PERFORM queen.fail_v1('tx_invalid_operations', 'operations must be an array of {type: "push" | "ack", ...}.', NULL);
  END IF;
  v_n := jsonb_array_length(p_ops);
  IF v_n > 1000 THEN
    PERFORM queen.fail_v1('tx_batch_too_large', format('The bundle has %s operations; at most 1000 are allowed.', v_n), NULL);
  END IF;
  FOR i IN 0 .. v_n - 1 LOOP
    v_op := p_ops->i;
    v_type := CASE WHEN jsonb_typeof(v_op) = 'object' THEN queen.log_str_v1(v_op->'type') END;
    IF v_type = 'ack' THEN
      v_norm := v_norm || queen.log_check_ack_v1(v_op, i);
      v_acks := v_acks || v_norm[i + 1];
    ELSIF v_type = 'push' THEN
      v_norm := v_norm || '{}'::jsonb;
      IF jsonb_typeof(v_op->'items') IS DISTINCT FROM 'array' OR jsonb_array_length(v_op->'items') = 0 THEN
        PERFORM queen.fail_v1('log_items_required', format('Operation %s: a push carries items, a non-empty array.', i), i);
      END IF;
      FOR j IN 0 .. jsonb_array_length(v_op->'items') - 1 LOOP
        v_item := v_op->'items'->j;
        IF jsonb_typeof(v_item) <> 'object'
           OR (v_item ? 'partition' AND jsonb_typeof(v_item->'partition') NOT IN ('string', 'null'))
           OR (v_item ? 'transactionId' AND jsonb_typeof(v_item->'transactionId') NOT IN ('string', 'null')) THEN
          PERFORM queen.fail_v1('log_invalid_item', format(
            'Operation %s, item %s: an item is {queue, partition?, payload, transactionId?} with string names.', i, j), i);
        END IF;
        PERFORM queen.log_check_push_v1(queen.log_str_v1(v_item->'queue'),
          coalesce(queen.log_str_v1(v_item->'partition'), 'Default'), queen.log_str_v1(v_item->'transactionId'), i);
        PERFORM queen.log_check_client_transaction_id_v1(queen.log_str_v1(v_item->'transactionId'), i);
        v_items := v_items || v_item;
      END LOOP;
    ELSE
      PERFORM queen.fail_v1('tx_unknown_operation', format('Operation %s: type is "push" or "ack".', i), i);
    END IF;
  END LOOP;

  -- Pushes to an encrypted queue the API did not seal: QK428 before anything is locked or written.
  -- p_sealed is aligned with the push operations' items in order (queen.log_op_items_v1). A bundle
  -- without pushes (an ack and its once-marker) skips the three (the queues' list is a SQL function
  -- planned at every call).
  IF cardinality(v_items) > 0 THEN
    IF p_v2 THEN
      v_queues := queen.log_item_queues_v1(to_jsonb(v_items));
      PERFORM queen.log_check_sealed_v1(p_tenant, to_jsonb(v_items), p_sealed);
    END IF;
    PERFORM queen.log_lock_partitions_v1(p_tenant, to_jsonb(v_items));
  END IF;
  -- The acks were gathered as they were checked (in order; log_lock_consumers_v1 sorts them).
  IF cardinality(v_acks) > 0 THEN PERFORM queen.log_lock_consumers_v1(p_tenant, v_acks); END IF;

  FOR i IN 0 .. v_n - 1 LOOP
    v_op := p_ops->i;
    IF v_op->>'type' = 'ack' AND p_v2 THEN
      v_out := v_out || (jsonb_build_object('index', i, 'type', 'ack') || queen.log_ack_one_v2(p_tenant, v_norm[i + 1], i, true));
    ELSIF v_op->>'type' = 'ack' THEN
      v_out := v_out || (jsonb_build_object('index', i, 'type', 'ack') || queen.log_ack_one_v1(p_tenant, v_norm[i + 1], i, true));
    ELSE
      -- Item by item in request order (log_push_items_v1 loops; an aggregate would not promise it).
      IF p_sealed IS NULL THEN
        v_pushed := queen.log_push_items_v1(p_tenant, v_op->'items', i);
      ELSE
        -- This operation's share of the sealed payloads (they align with every push item in order).
        SELECT coalesce(jsonb_agg(p_sealed->(v_at + k::int - 1) ORDER BY k), '[]'::jsonb) INTO v_slice
          FROM generate_series(1, jsonb_array_length(v_op->'items')) k;
        v_pushed := queen.log_push_items_v1(p_tenant, queen.log_sealed_items_v1(v_op->'items', v_slice), i);
        PERFORM queen.log_mark_sealed_v1(v_pushed, v_slice);
        v_at := v_at + jsonb_array_length(v_op->'items');
      END IF;
      v_out := v_out || jsonb_build_object('index', i, 'type', 'push', 'items', v_pushed);
    END IF;
  END LOOP;
  -- maxSize: a queue these pushes took past its cap refuses the bundle (raised: all of it rolls back).
  IF p_v2 AND cardinality(v_items) > 0 THEN PERFORM queen.log_check_size_v1(p_tenant, v_queues, NULL); END IF;
  RETURN to_jsonb(v_out);
END $$;

-- The transaction wire's `operations` as release 0.1.0 applies them: queen.log_apply_ops_v1
-- without 0.2's rules (no tenant-move gate, acks through queen.log_ack_one_v1, no encryption or
-- maxSize check).
CREATE OR REPLACE FUNCTION queen.log_apply_v1(p_tenant UUID, p_ops JSONB) RETURNS JSONB
LANGUAGE sql AS $$ SELECT queen.log_apply_ops_v1(p_tenant, p_ops, NULL, false) $$;

-- POST /api/v1/lease/:leaseId/extend: pushes a live lease's expiry to now + p_seconds (the queue's
-- lease time when NULL). An expired or unknown lease is not revived: a consumer whose lease lapsed
-- may already have been overtaken. Another tenant's lease is answered as an unknown one.
-- Where the lease is looked for (no index on lease_id since 058): a pop's own id
-- (queen.log_lease_id_v1, version 8) in the group rows of the partitions its prefix names, through
-- the primary key; any other id is first a shared id (queen.shared_leases), else a lease of a pop
-- from before 058 (a 0.1 API's, during a rolling upgrade), found by a scan of the group rows.
-- The same answers as 0.1's queen.log_extend_lease_v1, which is this function now.
CREATE OR REPLACE FUNCTION queen.log_extend_lease_v2(p_tenant UUID, p_lease TEXT, p_seconds INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_now TIMESTAMPTZ := clock_timestamp();
  v_expires TIMESTAMPTZ;
  v_own BOOLEAN;
  v_from UUID := '00000000-0000-0000-0000-000000000000';
  v_to UUID := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF NOT queen.uuid_ok_v1(p_lease) THEN
    PERFORM queen.fail_v1('log_invalid_lease_id', 'The lease id is the UUID the pop answered.', NULL);
  END IF;
  IF p_seconds IS NOT NULL AND (p_seconds < 1 OR p_seconds > 86400) THEN
    PERFORM queen.fail_v1('log_invalid_lease_time', 'seconds is a whole number from 1 to 86400.', NULL);
  END IF;
  v_own := substr(lower(p_lease), 15, 1) = '8';
  IF v_own THEN
    v_from := (left(replace(lower(p_lease), '-', ''), 12) || '00000000000000000000')::uuid;
    v_to := (left(replace(lower(p_lease), '-', ''), 12) || 'ffffffffffffffffffff')::uuid;
  ELSE
    -- The shared id of a pop of several partitions: every live lease handed out under it.
    WITH extended AS (
      UPDATE queen.partition_consumers c
         SET lease_expires_at = v_now + make_interval(secs => coalesce(p_seconds, (
               SELECT q.lease_time FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = c.partition_id))),
             updated_at = v_now
        FROM queen.shared_leases s
       WHERE s.shared_id = p_lease::uuid AND c.partition_id = s.partition_id AND c.consumer_group = s.consumer_group
         AND c.lease_id = s.lease_id AND c.lease_expires_at > v_now
         AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                      WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
      RETURNING c.lease_expires_at)
    SELECT min(e.lease_expires_at) INTO v_expires FROM extended e;
  END IF;
  IF v_expires IS NULL THEN
    UPDATE queen.partition_consumers c
       SET lease_expires_at = v_now + make_interval(secs => coalesce(p_seconds, (
             SELECT q.lease_time FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = c.partition_id))),
           updated_at = v_now
     WHERE c.partition_id BETWEEN v_from AND v_to AND c.lease_id = p_lease::uuid AND c.lease_expires_at > v_now
       AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                    WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
    RETURNING c.lease_expires_at INTO v_expires;
  END IF;
  IF v_expires IS NULL THEN
    RETURN jsonb_build_object('ok', false, 'success', false, 'error', 'lease_expired', 'reason', 'lease_expired', 'leaseId', p_lease);
  END IF;
  RETURN jsonb_build_object('ok', true, 'success', true, 'leaseId', lower(p_lease), 'leaseExpiresAt', queen.ts_v1(v_expires));
END $$;

-- 0.1's POST /api/v1/lease/:leaseId/extend: queen.log_extend_lease_v2 (the same answers).
CREATE OR REPLACE FUNCTION queen.log_extend_lease_v1(p_tenant UUID, p_lease TEXT, p_seconds INT) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT queen.log_extend_lease_v2(p_tenant, p_lease, p_seconds)
$$;

-- The subscription of a named consumer group, before a pop with Queen's subscriptionMode=new (or
-- subscriptionFrom=now):
-- the group starts at the end of each partition of the queue (or of the named one) it has not read
-- yet, so it sees only messages pushed from now on. Partitions the group already reads keep their
-- cursor (the first pop decides, as in Queen); a partition created later is read from its
-- beginning. Called before the pop, in its own statement; creates rows only (ON CONFLICT DO
-- NOTHING), so a concurrent pop of the group is never disturbed. Each partition read is locked FOR
-- KEY SHARE, as the pop's own first-sight rows are (queen.log_pop_v1): a queue deleted under it is
-- skipped rather than breaking partition_consumers_partition_id_fkey. p_from NULL is now (each
-- new row's cursor at its partition's last_seq), else the messages stored before p_from are
-- skipped (queen.log_subscribe_from_v1); p_option names the request's option in the refusal of
-- queue mode.
CREATE OR REPLACE FUNCTION queen.log_subscribe_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_from TIMESTAMPTZ, p_option TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  IF p_group = '__QUEUE_MODE__' THEN
    PERFORM queen.fail_v1('unsupported', p_option || ' applies to a named consumer group (consumerGroup), not to queue mode.', NULL);
  END IF;
  INSERT INTO queen.partition_consumers (partition_id, consumer_group, cursor_seq)
  SELECT p.id, p_group, CASE WHEN p_from IS NULL THEN p.last_seq
                             ELSE coalesce((SELECT max(m.seq) FROM queen.messages m WHERE m.partition_id = p.id AND m.created_at < p_from), 0) END
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
   WHERE q.tenant_id = p_tenant AND q.name = p_queue AND (p_partition IS NULL OR p.name = p_partition)
     FOR KEY SHARE OF p
  ON CONFLICT DO NOTHING;
END $$;

-- queen.log_subscribe_v1 from now.
CREATE OR REPLACE FUNCTION queen.log_subscribe_new_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT) RETURNS VOID
LANGUAGE sql AS $$
  SELECT queen.log_subscribe_v1(p_tenant, p_queue, p_partition, p_group, NULL, 'subscriptionMode new');
$$;

-- DELETE /api/v1/resources/queues/:queue: the tenant's queue and everything in it (partitions,
-- messages, consumer groups' cursors and leases, failure counts and dead letters: ON DELETE
-- CASCADE). Answers Queen's {deleted: true, queue, existed}; deleting a queue that does not exist
-- is not an error (existed: false). A push, pop or fire in flight on it either finishes first (the
-- delete waits for it) or waits for the delete and then answers as for a missing queue: a push
-- creates it anew, a pop finds nothing (docs/log-and-transactions.md).
-- The locks: the queue row, its partitions (in name order, as a push takes them) and their
-- partition_consumers rows (in (partition, group) order, as an ack takes them), all FOR UPDATE,
-- before anything is deleted. The cascade alone took them as it went, and the message path takes
-- partitions and cursor rows in both orders (a transaction-wire bundle: partitions, then the acks'
-- rows; a cursor row updated twice in one transaction, a pop's lapse or autoAck: the row, then its
-- partition FOR KEY SHARE through the foreign-key check), so no one order avoids every deadlock
-- (PostgreSQL ended one with an error, a 500 on one side). So the delete never waits while holding
-- these locks: it takes them NOWAIT in a subtransaction; when one is held, the subtransaction is
-- rolled back (its locks released) and the delete waits for the holders holding nothing (each row
-- locked in a subtransaction of its own, rolled back at once), then tries again. Bounded: after five
-- tries it waits as the cascade did. A delete is rare; the subtransactions cost it, not the path.
CREATE OR REPLACE FUNCTION queen.log_delete_queue_v1(p_tenant UUID, p_queue TEXT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_id UUID;
  r RECORD;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  PERFORM queen.check_name_v1(p_queue, 'log_invalid_queue', 'A queue name');
  SELECT q.id INTO v_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  FOR attempt IN 1 .. 5 LOOP
    EXIT WHEN v_id IS NULL;
    BEGIN
      PERFORM 1 FROM queen.queues q WHERE q.id = v_id FOR UPDATE NOWAIT;
      IF NOT FOUND THEN
        -- Deleted meanwhile by another delete: it may have been created anew since.
        SELECT q.id INTO v_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
        CONTINUE;
      END IF;
      PERFORM 1 FROM queen.partitions p WHERE p.queue_id = v_id ORDER BY p.name FOR UPDATE NOWAIT;
      PERFORM 1 FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
       WHERE p.queue_id = v_id ORDER BY c.partition_id, c.consumer_group FOR UPDATE OF c NOWAIT;
      DELETE FROM queen.queues q WHERE q.id = v_id;
      RETURN jsonb_build_object('ok', true, 'deleted', true, 'queue', p_queue, 'existed', true);
    EXCEPTION WHEN lock_not_available THEN
      NULL;
    END;
    -- A row was held: wait for its holders one row at a time, each lock let go at once, so the
    -- delete never waits holding one (a pop's first-sight rows lock partitions in scan order).
    BEGIN
      PERFORM 1 FROM queen.queues q WHERE q.id = v_id FOR UPDATE;
      RAISE EXCEPTION USING ERRCODE = 'QK000';
    EXCEPTION WHEN SQLSTATE 'QK000' THEN NULL;
    END;
    FOR r IN SELECT p.id FROM queen.partitions p WHERE p.queue_id = v_id ORDER BY p.name LOOP
      BEGIN
        PERFORM 1 FROM queen.partitions p WHERE p.id = r.id FOR UPDATE;
        RAISE EXCEPTION USING ERRCODE = 'QK000';
      EXCEPTION WHEN SQLSTATE 'QK000' THEN NULL;
      END;
    END LOOP;
    FOR r IN SELECT c.partition_id, c.consumer_group FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
              WHERE p.queue_id = v_id ORDER BY c.partition_id, c.consumer_group LOOP
      BEGIN
        PERFORM 1 FROM queen.partition_consumers c WHERE c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group FOR UPDATE;
        RAISE EXCEPTION USING ERRCODE = 'QK000';
      EXCEPTION WHEN SQLSTATE 'QK000' THEN NULL;
      END;
    END LOOP;
  END LOOP;
  -- Not found, or five tries without every lock at once (a busy queue): as before, the cascade.
  DELETE FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue RETURNING q.id INTO v_id;
  RETURN jsonb_build_object('ok', true, 'deleted', true, 'queue', p_queue, 'existed', v_id IS NOT NULL);
END $$;

-- GET /api/v1/dlq: the tenant's dead letters, newest first, optionally of one queue, one partition
-- and one consumer group, set aside at or after p_from and at or before p_to (NULL: unbounded);
-- `p_limit` from `p_offset`. A dead letter is per (message, group): the message took more failed
-- deliveries than the queue's retryLimit for that group (queen.log_ack_one_v1,
-- queen.log_lapse_lease_v1). Answers Queen's {messages: [...], pagination: {limit, offset}} and the
-- cell's `total` (how many match, beyond the page). errorMessage is the text the last `failed` ack
-- gave (null when none did, e.g. an expired lease). p_marks (0.2's queen.log_dead_letters_v2): each
-- entry also carries the message's trace context (traceId, traceparent) as a pop answers it, and one
-- whose payload is stored encrypted is marked "sealed": true for the API to open; without, 0.1.0's
-- entry (queen.log_dead_letters_v1).
CREATE OR REPLACE FUNCTION queen.log_dead_letters_page_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_limit INT, p_offset INT,
  p_from TIMESTAMPTZ, p_to TIMESTAMPTZ, p_marks BOOLEAN) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_out JSONB;
  v_total BIGINT;
BEGIN
  IF p_queue IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_queue, 'log_invalid_queue', 'A queue name');
  END IF;
  IF p_group IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  END IF;
  SELECT count(*) INTO v_total
    FROM queen.message_failures f JOIN queen.partitions p ON p.id = f.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE q.tenant_id = p_tenant AND f.dead_lettered_at IS NOT NULL
     AND (p_queue IS NULL OR q.name = p_queue) AND (p_partition IS NULL OR p.name = p_partition)
     AND (p_group IS NULL OR f.consumer_group = p_group)
     AND (p_from IS NULL OR f.dead_lettered_at >= p_from) AND (p_to IS NULL OR f.dead_lettered_at <= p_to);
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'id', queen.log_message_id_v1(d.partition_id, d.seq), 'transactionId', d.transaction_id,
           'partitionId', d.partition_id, 'queue', d.queue, 'partition', d.partition, 'consumerGroup', d.consumer_group,
           'errorMessage', d.error_message, 'retryCount', d.failures, 'data', d.payload, 'producerSub', NULL,
           'createdAt', queen.ts_v1(d.created_at), 'failedAt', queen.ts_v1(d.dead_lettered_at))
           || CASE WHEN NOT p_marks THEN '{}'::jsonb
                   ELSE jsonb_build_object('traceId', d.trace_id, 'traceparent', queen.log_traceparent_v1(d.trace_id, d.span_id))
                        || CASE WHEN d.sealed THEN '{"sealed": true}'::jsonb ELSE '{}'::jsonb END END
           ORDER BY d.dead_lettered_at DESC, d.partition_id, d.seq), '[]'::jsonb)
    INTO v_out
    FROM (SELECT f.partition_id, f.seq, f.consumer_group, f.failures, f.dead_lettered_at, m.transaction_id, m.payload,
                 m.created_at, m.trace_id, m.span_id, q.name AS queue, p.name AS partition, t.error_message,
                 p_marks AND EXISTS (SELECT 1 FROM queen.sealed_messages s WHERE s.partition_id = f.partition_id AND s.seq = f.seq) AS sealed
            FROM queen.message_failures f
            JOIN queen.messages m ON m.partition_id = f.partition_id AND m.seq = f.seq
            LEFT JOIN queen.message_failure_texts t
              ON t.partition_id = f.partition_id AND t.consumer_group = f.consumer_group AND t.seq = f.seq
            JOIN queen.partitions p ON p.id = f.partition_id JOIN queen.queues q ON q.id = p.queue_id
           WHERE q.tenant_id = p_tenant AND f.dead_lettered_at IS NOT NULL
             AND (p_queue IS NULL OR q.name = p_queue) AND (p_partition IS NULL OR p.name = p_partition)
     AND (p_group IS NULL OR f.consumer_group = p_group)
     AND (p_from IS NULL OR f.dead_lettered_at >= p_from) AND (p_to IS NULL OR f.dead_lettered_at <= p_to)
           ORDER BY f.dead_lettered_at DESC, f.partition_id, f.seq
           LIMIT p_limit OFFSET p_offset) d;
  RETURN jsonb_build_object('messages', v_out, 'total', v_total, 'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset));
END $$;

-- 0.1.0's GET /api/v1/dlq: queen.log_dead_letters_page_v1 unbounded in time, without the marks.
CREATE OR REPLACE FUNCTION queen.log_dead_letters_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_limit INT, p_offset INT) RETURNS JSONB
LANGUAGE sql AS $$ SELECT queen.log_dead_letters_page_v1(p_tenant, p_queue, p_partition, p_group, p_limit, p_offset, NULL, NULL, false) $$;

-- queen.log_apply_v1 with the queue options of 0.2 (queen.log_apply_ops_v1 with p_v2): acks through
-- queen.log_ack_one_v2 (retryDelay), pushes to an encrypted queue only sealed by the API (p_sealed,
-- else QK428 before anything is written; their messages marked), and maxSize checked after the
-- pushes (429 log_queue_full raised: the whole bundle rolls back). In SQL, one call: the planner
-- inlines it into the statements that call it (shared/sql/log.ts, queen.log_apply_traced_v1), so
-- the bundle costs no call more than when this was the plpgsql body.
CREATE OR REPLACE FUNCTION queen.log_apply_v2(p_tenant UUID, p_ops JSONB, p_sealed JSONB DEFAULT NULL) RETURNS JSONB
LANGUAGE sql AS $$ SELECT queen.log_apply_ops_v1(p_tenant, p_ops, p_sealed, true) $$;
-- POST /api/v1/configure since 0.2: queen.log_configure_v1 and the options of
-- sql/migrations/051_queue_options.sql, stored in queen.queue_options:
--   retryDelay (ms, 0 to 86,400,000; 1000 on a new queue, Queen's default; 0: redelivery at once), retryDelayMax (ms, the
--   cell's own: above retryDelay, the delay doubles with each failure of a message up to it),
--   maxSize (unconsumed messages, 0 = no cap, up to 1,000,000,000), priority (-1,000,000 to
--   1,000,000: the order of a pop by namespace/task), encryptionEnabled (a boolean; true needs the
--   API's key, p_can_encrypt, else 403 log_encryption_unavailable naming the variable), and the body's namespace and
--   task (strings, stored and answered; null or absent keeps them).
-- The retention options, retentionSeconds, completedRetentionSeconds, retentionEnabled,
-- maxWaitTimeSeconds and ttl, are stored in queen.queue_retention (a row once any of them was sent)
-- and applied by the sweeper (sql/functions/retention.sql); the answer echoes the stored values,
-- retentionEnabled as what applies (true unless a configure said false).
-- Queen's other options are still accepted only at their neutral value (v1's rule). An omitted
-- option keeps its value.
CREATE OR REPLACE FUNCTION queen.log_configure_v2(p_tenant UUID, p_body JSONB, p_can_encrypt BOOLEAN) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_queue TEXT;
  v_options JSONB := coalesce(nullif(p_body->'options', 'null'::jsonb), '{}'::jsonb);
  v_neutral JSONB := '{"deadLetterQueue": true, "dlqAfterMaxRetries": true}';
  v_implemented TEXT[] := ARRAY['leaseTime', 'retryLimit', 'delayedProcessing', 'windowBuffer', 'retryDelay', 'retryDelayMax',
    'maxSize', 'priority', 'encryptionEnabled'];
  v_retention_keys TEXT[] := ARRAY['retentionSeconds', 'completedRetentionSeconds', 'retentionEnabled', 'maxWaitTimeSeconds', 'ttl'];
  v_ret_s INT;
  v_done_s INT;
  v_wait_s INT;
  v_ttl INT;
  v_enabled BOOLEAN;
  v_ret queen.queue_retention;
  v_key TEXT;
  v_timing RECORD;
  v_stored JSONB;
  v_id UUID;
  v_retry_delay INT;
  v_retry_max INT;
  v_max_size INT;
  v_priority INT;
  v_encrypt BOOLEAN;
  v_namespace TEXT;
  v_task TEXT;
  v_opts queen.queue_options;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  v_queue := queen.log_configure_queue_v1(p_body);
  IF jsonb_typeof(v_options) <> 'object' THEN
    PERFORM queen.fail_v1('log_invalid_options', 'options must be an object {leaseTime?, retryLimit?, ...}.', NULL);
  END IF;
  FOREACH v_key IN ARRAY ARRAY['namespace', 'task'] LOOP
    IF coalesce(jsonb_typeof(p_body->v_key), 'null') NOT IN ('null', 'string')
       OR (queen.log_str_v1(p_body->v_key) <> '' AND NOT queen.log_name_ok_v1(queen.log_str_v1(p_body->v_key))) THEN
      PERFORM queen.fail_v1('log_invalid_options', format(
        '%s is a string of 1 to 128 characters of A-Z a-z 0-9 _ . : - not starting with . : or - (or "" or null).', v_key), NULL);
    END IF;
  END LOOP;
  v_namespace := queen.log_str_v1(p_body->'namespace');
  v_task := queen.log_str_v1(p_body->'task');
  PERFORM queen.log_check_neutral_options_v1(v_options, v_implemented || v_retention_keys, v_neutral);
  v_timing := queen.log_queue_timing_v1(v_options);
  SELECT w[1], w[2], w[3], w[4] INTO v_retry_delay, v_retry_max, v_max_size, v_priority
    FROM queen.log_whole_options_v1(v_options, ARRAY['retryDelay', 'retryDelayMax', 'maxSize', 'priority']) AS o (w);
  IF v_options ? 'encryptionEnabled' THEN
    IF jsonb_typeof(v_options->'encryptionEnabled') <> 'boolean' THEN
      PERFORM queen.fail_v1('log_invalid_options', 'options.encryptionEnabled is true or false.', NULL);
    END IF;
    v_encrypt := (v_options->>'encryptionEnabled')::boolean;
    IF v_encrypt AND NOT coalesce(p_can_encrypt, false) THEN
      PERFORM queen.fail_v1('log_encryption_unavailable',
        'options.encryptionEnabled: this cell has no encryption key; an operator sets QUEEN_ENCRYPTION_KEY (64 hex digits) on every API process first.', NULL);
    END IF;
  END IF;
  -- The retention options: the whole seconds (queen.log_option_bounds_v1), then retentionEnabled,
  -- a boolean, false keeping the queue's messages forever.
  SELECT w[1], w[2], w[3], w[4] INTO v_ret_s, v_done_s, v_wait_s, v_ttl
    FROM queen.log_whole_options_v1(v_options, ARRAY['retentionSeconds', 'completedRetentionSeconds', 'maxWaitTimeSeconds', 'ttl']) AS o (w);
  IF v_options ? 'retentionEnabled' THEN
    IF jsonb_typeof(v_options->'retentionEnabled') <> 'boolean' THEN
      PERFORM queen.fail_v1('log_invalid_options', 'options.retentionEnabled is true or false (false keeps the queue''s messages forever).', NULL);
    END IF;
    v_enabled := (v_options->>'retentionEnabled')::boolean;
  END IF;
  v_stored := queen.log_store_queue_v1(p_tenant, v_queue, v_timing.lease_time, v_timing.retry_limit,
    v_timing.delayed_processing, v_timing.window_buffer);
  v_id := (v_stored->>'queueId')::uuid;
  IF num_nulls(v_retry_delay, v_retry_max, v_max_size, v_priority, v_encrypt, v_namespace, v_task) < 7 THEN
    INSERT INTO queen.queue_options AS o (queue_id, retry_delay_ms, retry_delay_max_ms, max_size, priority, namespace, task, encryption_enabled)
    VALUES (v_id, coalesce(v_retry_delay, queen.log_retry_delay_default_v1()), coalesce(v_retry_max, 0), coalesce(v_max_size, 0), coalesce(v_priority, 0),
            coalesce(v_namespace, ''), coalesce(v_task, ''), coalesce(v_encrypt, false))
    ON CONFLICT (queue_id) DO UPDATE SET retry_delay_ms = coalesce(v_retry_delay, o.retry_delay_ms),
      retry_delay_max_ms = coalesce(v_retry_max, o.retry_delay_max_ms), max_size = coalesce(v_max_size, o.max_size),
      priority = coalesce(v_priority, o.priority), namespace = coalesce(v_namespace, o.namespace), task = coalesce(v_task, o.task),
      encryption_enabled = coalesce(v_encrypt, o.encryption_enabled)
    RETURNING * INTO v_opts;
  ELSE
    SELECT * INTO v_opts FROM queen.queue_options o WHERE o.queue_id = v_id;
  END IF;
  IF v_options ?| v_retention_keys THEN
    INSERT INTO queen.queue_retention AS t (queue_id, retention_seconds, completed_retention_seconds, retention_enabled,
                                          max_wait_time_seconds, ttl)
    VALUES (v_id, coalesce(v_ret_s, 0), coalesce(v_done_s, 0), v_enabled, coalesce(v_wait_s, 0), coalesce(v_ttl, 0))
    ON CONFLICT (queue_id) DO UPDATE SET retention_seconds = coalesce(v_ret_s, t.retention_seconds),
      completed_retention_seconds = coalesce(v_done_s, t.completed_retention_seconds),
      retention_enabled = CASE WHEN v_options ? 'retentionEnabled' THEN v_enabled ELSE t.retention_enabled END,
      max_wait_time_seconds = coalesce(v_wait_s, t.max_wait_time_seconds), ttl = coalesce(v_ttl, t.ttl), updated_at = now()
    RETURNING * INTO v_ret;
  ELSE
    SELECT * INTO v_ret FROM queen.queue_retention t WHERE t.queue_id = v_id;
  END IF;
  RETURN jsonb_build_object('ok', true, 'configured', true,
    'namespace', coalesce(v_opts.namespace, ''), 'task', coalesce(v_opts.task, ''),
    'options', v_neutral || (v_stored->'options') || jsonb_build_object(
      'retryDelay', coalesce(v_opts.retry_delay_ms, queen.log_retry_delay_default_v1()), 'retryDelayMax', coalesce(v_opts.retry_delay_max_ms, 0),
      'maxSize', coalesce(v_opts.max_size, 0), 'priority', coalesce(v_opts.priority, 0),
      'encryptionEnabled', coalesce(v_opts.encryption_enabled, false),
      'retentionSeconds', coalesce(v_ret.retention_seconds, 0), 'completedRetentionSeconds', coalesce(v_ret.completed_retention_seconds, 0),
      'retentionEnabled', v_ret.retention_enabled IS DISTINCT FROM false, 'maxWaitTimeSeconds', coalesce(v_ret.max_wait_time_seconds, 0),
      'ttl', coalesce(v_ret.ttl, 0))) || (v_stored - 'options');
END $$;

-- A pop with Queen's subscriptionFrom=<timestamp> for a named consumer group: as
-- queen.log_subscribe_new_v1, but each partition the group has not read yet starts after the
-- messages stored before p_from (the group reads those stored at or after it). The first pop
-- decides, as with `new`.
CREATE OR REPLACE FUNCTION queen.log_subscribe_from_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_from TIMESTAMPTZ) RETURNS VOID
LANGUAGE sql AS $$
  SELECT queen.log_subscribe_v1(p_tenant, p_queue, p_partition, p_group, p_from, 'subscriptionFrom');
$$;

-- DELETE /api/v1/consumer-groups/:group: everything the tenant's group holds on every queue: its
-- cursors and leases (so the next pop of that group starts it anew, by its subscription rule),
-- its failure counts, error texts and dead letters. Queue mode (__QUEUE_MODE__) is a group like
-- the others here. p_delete_metadata is Queen's deleteMetadata: the cell keeps no subscription
-- record apart from the cursors, so it only echoes. Answers Queen's {success, consumerGroup,
-- deletedPartitions, metadataDeleted}.
CREATE OR REPLACE FUNCTION queen.log_delete_consumer_group_v1(p_tenant UUID, p_group TEXT, p_delete_metadata BOOLEAN) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_n INT;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  -- The group's rows first, in the order an ack takes them (partition_consumers, then its
  -- failure rows), so a concurrent ack of the group waits here rather than deadlocking.
  PERFORM 1 FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE c.consumer_group = p_group AND q.tenant_id = p_tenant ORDER BY c.partition_id FOR UPDATE OF c;
  WITH gone AS (
    DELETE FROM queen.partition_consumers c USING queen.partitions p, queen.queues q
     WHERE c.consumer_group = p_group AND p.id = c.partition_id AND q.id = p.queue_id AND q.tenant_id = p_tenant
    RETURNING 1)
  SELECT count(*) INTO v_n FROM gone;
  -- Its queues forget it: a pop of the group starts it anew on every partition (queen.log_register_group_v1).
  DELETE FROM queen.consumer_groups g USING queen.queues q
   WHERE g.consumer_group = p_group AND q.id = g.queue_id AND q.tenant_id = p_tenant;
  DELETE FROM queen.message_failure_texts t USING queen.partitions p, queen.queues q
   WHERE t.consumer_group = p_group AND p.id = t.partition_id AND q.id = p.queue_id AND q.tenant_id = p_tenant;
  DELETE FROM queen.message_failures f USING queen.partitions p, queen.queues q
   WHERE f.consumer_group = p_group AND p.id = f.partition_id AND q.id = p.queue_id AND q.tenant_id = p_tenant;
  RETURN jsonb_build_object('ok', true, 'success', true, 'consumerGroup', p_group, 'deletedPartitions', v_n,
                            'metadataDeleted', coalesce(p_delete_metadata, true));
END $$;

-- GET /api/v1/dlq since 0.2: queen.log_dead_letters_v1 with Queen's from/to, the trace context and
-- the sealed mark (queen.log_dead_letters_page_v1 with p_marks), a moving tenant refused first.
CREATE OR REPLACE FUNCTION queen.log_dead_letters_v2(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_limit INT, p_offset INT,
  p_from TIMESTAMPTZ, p_to TIMESTAMPTZ) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT coalesce(queen.tenant_gate_v1(p_tenant),
                  queen.log_dead_letters_page_v1(p_tenant, p_queue, p_partition, p_group, p_limit, p_offset, p_from, p_to, true))
$$;

-- The transaction wire's `operations` with trace context (a push item's traceId, or the bundle
-- request's sampled span, p_trace as queen.log_stamp_traces_v1 takes it): queen.log_apply_v2, then
-- each push operation's stored messages stamped. A bundle without any goes to log_apply_v2 alone.
CREATE OR REPLACE FUNCTION queen.log_apply_traced_v1(p_tenant UUID, p_ops JSONB, p_sealed JSONB, p_trace JSONB) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT coalesce((SELECT jsonb_agg(CASE WHEN e ->> 'type' = 'push'
                                         THEN e || jsonb_build_object('items', queen.log_stamp_traces_v1(e -> 'items',
                                                     p_ops -> ((e ->> 'index')::int) -> 'items', p_trace, (e ->> 'index')::int))
                                         ELSE e END ORDER BY k)
                     FROM jsonb_array_elements(s.r) WITH ORDINALITY AS t (e, k)), s.r)
    FROM (SELECT queen.log_apply_v2(p_tenant, p_ops, p_sealed) AS r OFFSET 0) s
$$;
