-- The transaction wire's operations, queue administration and lease extension.

-- Creates and locks, in ascending (queue, partition) order, every partition of the tenant these
-- (validated) items push to. (The fire, pushing for several tenants, calls it tenant by tenant in
-- ascending tenant order: one order, restricted to any one tenant the same.)
CREATE OR REPLACE FUNCTION queen.log_lock_partitions_v1(p_tenant UUID, p_items JSONB) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
  r RECORD;
  v_ids RECORD;
BEGIN
  FOR r IN
    SELECT DISTINCT it->>'queue' COLLATE "C" AS queue, coalesce(it->>'partition', 'Default') COLLATE "C" AS partition
      FROM jsonb_array_elements(p_items) it ORDER BY 1, 2
  LOOP
    v_ids := queen.log_ensure_partition_v1(p_tenant, r.queue, r.partition);
    PERFORM 1 FROM queen.partitions p WHERE p.id = v_ids.p_id FOR NO KEY UPDATE;
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
  v_queue TEXT := queen.log_str_v1(p_body->'queue');
  v_options JSONB := coalesce(nullif(p_body->'options', 'null'::jsonb), '{}'::jsonb);
  -- Queen's options at the value meaning what the cell does.
  v_neutral JSONB := '{"priority": 0, "delayedProcessing": 0, "windowBuffer": 0, "maxSize": 0, "ttl": 0,
    "retryDelay": 0, "retentionSeconds": 0, "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0,
    "retentionEnabled": false, "encryptionEnabled": false, "deadLetterQueue": true, "dlqAfterMaxRetries": true}';
  v_key TEXT;
  v_lease INT;
  v_retry INT;
  v_row queen.queues;
  v_delay INT;
  v_window INT;
  v_delays queen.queue_delays;
BEGIN
  IF jsonb_typeof(p_body) <> 'object' THEN
    PERFORM queen.fail_v1('invalid_json', 'The request body must be a JSON object.', NULL);
  END IF;
  IF v_queue IS NULL THEN
    PERFORM queen.fail_v1('log_queue_required', 'queue is required (a string).', NULL);
  END IF;
  IF NOT queen.log_name_ok_v1(v_queue) THEN
    PERFORM queen.fail_v1('log_invalid_queue', 'A queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF jsonb_typeof(v_options) <> 'object' THEN
    PERFORM queen.fail_v1('log_invalid_options', 'options must be an object {leaseTime?, retryLimit?}.', NULL);
  END IF;
  FOREACH v_key IN ARRAY ARRAY['namespace', 'task'] LOOP
    IF coalesce(p_body->>v_key, '') <> '' THEN
      PERFORM queen.fail_v1('unsupported', format('%s: the cell has no queue %ss (nor pop by them); leave it out or null.', v_key, v_key), NULL);
    END IF;
  END LOOP;
  FOR v_key IN SELECT k FROM jsonb_object_keys(v_options) k ORDER BY k LOOP
    CONTINUE WHEN v_key IN ('leaseTime', 'retryLimit', 'delayedProcessing', 'windowBuffer');
    IF NOT v_neutral ? v_key THEN
      PERFORM queen.fail_v1('unsupported', format('options.%s: the cell does not know this option.', v_key), NULL);
    END IF;
    IF v_options->v_key IS DISTINCT FROM v_neutral->v_key AND NOT (jsonb_typeof(v_options->v_key) = 'number'
       AND jsonb_typeof(v_neutral->v_key) = 'number' AND (v_options->>v_key)::numeric = (v_neutral->>v_key)::numeric) THEN
      PERFORM queen.fail_v1('unsupported', format('options.%s: the cell implements only %s (what it always does); it does not implement other values.',
        v_key, v_neutral->v_key), NULL);
    END IF;
  END LOOP;
  v_lease := queen.log_whole_option_v1(v_options, 'leaseTime', 1, 86400, 'log_invalid_lease_time',
    'options.leaseTime is a whole number of seconds from 1 to 86400.');
  v_retry := queen.log_whole_option_v1(v_options, 'retryLimit', 0, 1000, 'log_invalid_retry_limit',
    'options.retryLimit is a whole number from 0 to 1000.');
  v_delay := queen.log_whole_option_v1(v_options, 'delayedProcessing', 0, 86400, 'log_invalid_options',
    'options.delayedProcessing is a whole number of seconds from 0 to 86400.');
  v_window := queen.log_whole_option_v1(v_options, 'windowBuffer', 0, 86400, 'log_invalid_options',
    'options.windowBuffer is a whole number of seconds from 0 to 86400.');
  INSERT INTO queen.queues AS q (tenant_id, name, lease_time, retry_limit)
  VALUES (p_tenant, v_queue, coalesce(v_lease, 300), coalesce(v_retry, 3))
  ON CONFLICT (tenant_id, name) DO UPDATE SET lease_time = coalesce(v_lease, q.lease_time),
                                   retry_limit = coalesce(v_retry, q.retry_limit), updated_at = now()
  RETURNING * INTO v_row;
  IF v_delay IS NOT NULL OR v_window IS NOT NULL THEN
    INSERT INTO queen.queue_delays AS d (queue_id, delayed_processing, window_buffer)
    VALUES (v_row.id, coalesce(v_delay, 0), coalesce(v_window, 0))
    ON CONFLICT (queue_id) DO UPDATE SET delayed_processing = coalesce(v_delay, d.delayed_processing),
                                         window_buffer = coalesce(v_window, d.window_buffer)
    RETURNING * INTO v_delays;
  ELSE
    SELECT * INTO v_delays FROM queen.queue_delays d WHERE d.queue_id = v_row.id;
  END IF;
  RETURN jsonb_build_object('ok', true, 'configured', true, 'queueId', v_row.id, 'queue', v_row.name,
    'namespace', '', 'task', '',
    'options', v_neutral || jsonb_build_object('leaseTime', v_row.lease_time, 'retryLimit', v_row.retry_limit,
      'delayedProcessing', coalesce(v_delays.delayed_processing, 0), 'windowBuffer', coalesce(v_delays.window_buffer, 0)));
END $$;

-- POST /api/v1/configure, as queen.log_configure_v1, and the retention options implemented:
-- retentionSeconds, completedRetentionSeconds, retentionEnabled, maxWaitTimeSeconds and ttl are
-- stored in queen.queue_retention (a row once any of them was sent) and applied by the sweeper
-- (sql/functions/retention.sql). An omitted one keeps its current value; the answer echoes the
-- stored values, retentionEnabled as what applies (true unless a configure said false).
CREATE OR REPLACE FUNCTION queen.log_configure_v2(p_tenant UUID, p_body JSONB) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_queue TEXT := queen.log_str_v1(p_body->'queue');
  v_options JSONB := coalesce(nullif(p_body->'options', 'null'::jsonb), '{}'::jsonb);
  -- Queen's options at the value meaning what the cell does.
  v_neutral JSONB := '{"priority": 0, "delayedProcessing": 0, "windowBuffer": 0, "maxSize": 0,
    "retryDelay": 0, "encryptionEnabled": false, "deadLetterQueue": true, "dlqAfterMaxRetries": true}';
  v_retention_keys TEXT[] := ARRAY['retentionSeconds', 'completedRetentionSeconds', 'retentionEnabled', 'maxWaitTimeSeconds', 'ttl'];
  v_ret_s INT;
  v_done_s INT;
  v_wait_s INT;
  v_ttl INT;
  v_enabled BOOLEAN;
  v_ret queen.queue_retention;
  v_key TEXT;
  v_lease INT;
  v_retry INT;
  v_row queen.queues;
  v_delay INT;
  v_window INT;
  v_delays queen.queue_delays;
BEGIN
  IF jsonb_typeof(p_body) <> 'object' THEN
    PERFORM queen.fail_v1('invalid_json', 'The request body must be a JSON object.', NULL);
  END IF;
  IF v_queue IS NULL THEN
    PERFORM queen.fail_v1('log_queue_required', 'queue is required (a string).', NULL);
  END IF;
  IF NOT queen.log_name_ok_v1(v_queue) THEN
    PERFORM queen.fail_v1('log_invalid_queue', 'A queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF jsonb_typeof(v_options) <> 'object' THEN
    PERFORM queen.fail_v1('log_invalid_options', 'options must be an object {leaseTime?, retryLimit?}.', NULL);
  END IF;
  FOREACH v_key IN ARRAY ARRAY['namespace', 'task'] LOOP
    IF coalesce(p_body->>v_key, '') <> '' THEN
      PERFORM queen.fail_v1('unsupported', format('%s: the cell has no queue %ss (nor pop by them); leave it out or null.', v_key, v_key), NULL);
    END IF;
  END LOOP;
  FOR v_key IN SELECT k FROM jsonb_object_keys(v_options) k ORDER BY k LOOP
    CONTINUE WHEN v_key IN ('leaseTime', 'retryLimit', 'delayedProcessing', 'windowBuffer') OR v_key = ANY (v_retention_keys);
    IF NOT v_neutral ? v_key THEN
      PERFORM queen.fail_v1('unsupported', format('options.%s: the cell does not know this option.', v_key), NULL);
    END IF;
    IF v_options->v_key IS DISTINCT FROM v_neutral->v_key AND NOT (jsonb_typeof(v_options->v_key) = 'number'
       AND jsonb_typeof(v_neutral->v_key) = 'number' AND (v_options->>v_key)::numeric = (v_neutral->>v_key)::numeric) THEN
      PERFORM queen.fail_v1('unsupported', format('options.%s: the cell implements only %s (what it always does); it does not implement other values.',
        v_key, v_neutral->v_key), NULL);
    END IF;
  END LOOP;
  v_lease := queen.log_whole_option_v1(v_options, 'leaseTime', 1, 86400, 'log_invalid_lease_time',
    'options.leaseTime is a whole number of seconds from 1 to 86400.');
  v_retry := queen.log_whole_option_v1(v_options, 'retryLimit', 0, 1000, 'log_invalid_retry_limit',
    'options.retryLimit is a whole number from 0 to 1000.');
  v_delay := queen.log_whole_option_v1(v_options, 'delayedProcessing', 0, 86400, 'log_invalid_options',
    'options.delayedProcessing is a whole number of seconds from 0 to 86400.');
  v_window := queen.log_whole_option_v1(v_options, 'windowBuffer', 0, 86400, 'log_invalid_options',
    'options.windowBuffer is a whole number of seconds from 0 to 86400.');
  -- The retention options (sql/functions/retention.sql says what each removes): whole seconds from 0
  -- (not set) to ten years; retentionEnabled a boolean, false keeping the queue's messages forever.
  v_ret_s := queen.log_whole_option_v1(v_options, 'retentionSeconds', 0, 315360000, 'log_invalid_options',
    'options.retentionSeconds is a whole number of seconds from 0 (the cell''s default retention) to 315360000.');
  v_done_s := queen.log_whole_option_v1(v_options, 'completedRetentionSeconds', 0, 315360000, 'log_invalid_options',
    'options.completedRetentionSeconds is a whole number of seconds from 0 (not set) to 315360000.');
  v_wait_s := queen.log_whole_option_v1(v_options, 'maxWaitTimeSeconds', 0, 315360000, 'log_invalid_options',
    'options.maxWaitTimeSeconds is a whole number of seconds from 0 (not set) to 315360000.');
  v_ttl := queen.log_whole_option_v1(v_options, 'ttl', 0, 315360000, 'log_invalid_options',
    'options.ttl is a whole number of seconds from 0 (not set) to 315360000.');
  IF v_options ? 'retentionEnabled' THEN
    IF jsonb_typeof(v_options->'retentionEnabled') <> 'boolean' THEN
      PERFORM queen.fail_v1('log_invalid_options', 'options.retentionEnabled is true or false (false keeps the queue''s messages forever).', NULL);
    END IF;
    v_enabled := (v_options->>'retentionEnabled')::boolean;
  END IF;
  INSERT INTO queen.queues AS q (tenant_id, name, lease_time, retry_limit)
  VALUES (p_tenant, v_queue, coalesce(v_lease, 300), coalesce(v_retry, 3))
  ON CONFLICT (tenant_id, name) DO UPDATE SET lease_time = coalesce(v_lease, q.lease_time),
                                   retry_limit = coalesce(v_retry, q.retry_limit), updated_at = now()
  RETURNING * INTO v_row;
  IF v_delay IS NOT NULL OR v_window IS NOT NULL THEN
    INSERT INTO queen.queue_delays AS d (queue_id, delayed_processing, window_buffer)
    VALUES (v_row.id, coalesce(v_delay, 0), coalesce(v_window, 0))
    ON CONFLICT (queue_id) DO UPDATE SET delayed_processing = coalesce(v_delay, d.delayed_processing),
                                         window_buffer = coalesce(v_window, d.window_buffer)
    RETURNING * INTO v_delays;
  ELSE
    SELECT * INTO v_delays FROM queen.queue_delays d WHERE d.queue_id = v_row.id;
  END IF;
  IF v_options ?| v_retention_keys THEN
    INSERT INTO queen.queue_retention AS t (queue_id, retention_seconds, completed_retention_seconds, retention_enabled,
                                          max_wait_time_seconds, ttl)
    VALUES (v_row.id, coalesce(v_ret_s, 0), coalesce(v_done_s, 0), v_enabled, coalesce(v_wait_s, 0), coalesce(v_ttl, 0))
    ON CONFLICT (queue_id) DO UPDATE SET retention_seconds = coalesce(v_ret_s, t.retention_seconds),
      completed_retention_seconds = coalesce(v_done_s, t.completed_retention_seconds),
      retention_enabled = CASE WHEN v_options ? 'retentionEnabled' THEN v_enabled ELSE t.retention_enabled END,
      max_wait_time_seconds = coalesce(v_wait_s, t.max_wait_time_seconds), ttl = coalesce(v_ttl, t.ttl), updated_at = now()
    RETURNING * INTO v_ret;
  ELSE
    SELECT * INTO v_ret FROM queen.queue_retention t WHERE t.queue_id = v_row.id;
  END IF;
  RETURN jsonb_build_object('ok', true, 'configured', true, 'queueId', v_row.id, 'queue', v_row.name,
    'namespace', '', 'task', '',
    'options', v_neutral || jsonb_build_object('leaseTime', v_row.lease_time, 'retryLimit', v_row.retry_limit,
      'delayedProcessing', coalesce(v_delays.delayed_processing, 0), 'windowBuffer', coalesce(v_delays.window_buffer, 0),
      'retentionSeconds', coalesce(v_ret.retention_seconds, 0), 'completedRetentionSeconds', coalesce(v_ret.completed_retention_seconds, 0),
      'retentionEnabled', v_ret.retention_enabled IS DISTINCT FROM false, 'maxWaitTimeSeconds', coalesce(v_ret.max_wait_time_seconds, 0),
      'ttl', coalesce(v_ret.ttl, 0)));
END $$;

-- Locks, in ascending (partition, group) order, the partition_consumers rows of the tenant's queues
-- these normalized acks touch, so the acks of one call never wait on another call's in a circle
-- (and never on another tenant's rows: a partitionId of another tenant is not even locked).
-- (plpgsql, not sql: a sql function's body is analysed at CREATE, which would take a lock on the
-- table at every boot.)
CREATE OR REPLACE FUNCTION queen.log_lock_consumers_v1(p_tenant UUID, p_acks JSONB[]) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM queen.partition_consumers c
   WHERE (c.partition_id, c.consumer_group) IN (
     SELECT (a->>'partitionId')::uuid, (a->>'consumerGroup') COLLATE "C" FROM unnest(p_acks) a)
     AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                  WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
   ORDER BY c.partition_id, c.consumer_group
   FOR NO KEY UPDATE OF c;
END $$;

-- The transaction wire's `operations`, the partitions/messages lock space (shared/lockOrder.ts
-- runs it after KV and timers). Validates every operation, locks partitions (pushes) then
-- partition_consumers rows (acks) in ascending order, then applies them in request order.
-- A failing ack raises QK412 (everything in the bundle rolls back). Answers one element per
-- operation: {index, type: "push", items: [...]} or {index, type: "ack", ...}.
CREATE OR REPLACE FUNCTION queen.log_apply_v1(p_tenant UUID, p_ops JSONB) RETURNS JSONB
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
  j INT;
  i INT;
BEGIN
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

  IF cardinality(v_items) > 0 THEN PERFORM queen.log_lock_partitions_v1(p_tenant, to_jsonb(v_items)); END IF;
  SELECT coalesce(array_agg(n), '{}') INTO v_acks FROM unnest(v_norm) n WHERE n ? 'transactionId';
  IF cardinality(v_acks) > 0 THEN PERFORM queen.log_lock_consumers_v1(p_tenant, v_acks); END IF;

  FOR i IN 0 .. v_n - 1 LOOP
    v_op := p_ops->i;
    IF v_op->>'type' = 'ack' THEN
      v_out := v_out || (jsonb_build_object('index', i, 'type', 'ack') || queen.log_ack_one_v1(p_tenant, v_norm[i + 1], i, true));
    ELSE
      -- Item by item in request order (log_push_items_v1 loops; an aggregate would not promise it).
      v_out := v_out || jsonb_build_object('index', i, 'type', 'push', 'items', queen.log_push_items_v1(p_tenant, v_op->'items', i));
    END IF;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;

-- POST /api/v1/lease/:leaseId/extend: pushes a live lease's expiry to now + p_seconds (the queue's
-- lease time when NULL). An expired or unknown lease is not revived: a consumer whose lease lapsed
-- may already have been overtaken. Another tenant's lease is answered as an unknown one.
CREATE OR REPLACE FUNCTION queen.log_extend_lease_v1(p_tenant UUID, p_lease TEXT, p_seconds INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_now TIMESTAMPTZ := clock_timestamp();
  v_expires TIMESTAMPTZ;
BEGIN
  IF NOT queen.uuid_ok_v1(p_lease) THEN
    PERFORM queen.fail_v1('log_invalid_lease_id', 'The lease id is the UUID the pop answered.', NULL);
  END IF;
  IF p_seconds IS NOT NULL AND (p_seconds < 1 OR p_seconds > 86400) THEN
    PERFORM queen.fail_v1('log_invalid_lease_time', 'seconds is a whole number from 1 to 86400.', NULL);
  END IF;
  UPDATE queen.partition_consumers c
     SET lease_expires_at = v_now + make_interval(secs => coalesce(p_seconds, (
           SELECT q.lease_time FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = c.partition_id))),
         updated_at = v_now
   WHERE c.lease_id = p_lease::uuid AND c.lease_expires_at > v_now
     AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                  WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
  RETURNING c.lease_expires_at INTO v_expires;
  IF v_expires IS NULL THEN
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
    RETURN jsonb_build_object('ok', false, 'success', false, 'error', 'lease_expired', 'reason', 'lease_expired', 'leaseId', p_lease);
  END IF;
  RETURN jsonb_build_object('ok', true, 'success', true, 'leaseId', lower(p_lease), 'leaseExpiresAt', queen.ts_v1(v_expires));
END $$;

-- A pop with Queen's subscriptionMode=new (or subscriptionFrom=now) for a named consumer group:
-- the group starts at the end of each partition of the queue (or of the named one) it has not read
-- yet, so it sees only messages pushed from now on. Partitions the group already reads keep their
-- cursor (the first pop decides, as in Queen); a partition created later is read from its
-- beginning. Called before the pop, in its own statement; creates rows only (ON CONFLICT DO
-- NOTHING), so a concurrent pop of the group is never disturbed.
CREATE OR REPLACE FUNCTION queen.log_subscribe_new_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT queen.log_name_ok_v1(p_group) THEN
    PERFORM queen.fail_v1('log_invalid_consumer_group', 'A consumer group is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF p_group = '__QUEUE_MODE__' THEN
    PERFORM queen.fail_v1('unsupported', 'subscriptionMode new applies to a named consumer group (consumerGroup), not to queue mode.', NULL);
  END IF;
  INSERT INTO queen.partition_consumers (partition_id, consumer_group, cursor_seq)
  SELECT p.id, p_group, p.last_seq
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
   WHERE q.tenant_id = p_tenant AND q.name = p_queue AND (p_partition IS NULL OR p.name = p_partition)
  ON CONFLICT DO NOTHING;
END $$;

-- DELETE /api/v1/resources/queues/:queue: the tenant's queue and everything in it (partitions,
-- messages, consumer groups' cursors and leases, failure counts and dead letters: ON DELETE
-- CASCADE). Answers Queen's {deleted: true, queue, existed}; deleting a queue that does not exist
-- is not an error (existed: false). Pops in flight on it find nothing; a later push creates it anew.
CREATE OR REPLACE FUNCTION queen.log_delete_queue_v1(p_tenant UUID, p_queue TEXT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_id UUID;
BEGIN
  IF NOT queen.log_name_ok_v1(p_queue) THEN
    PERFORM queen.fail_v1('log_invalid_queue', 'A queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  DELETE FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue RETURNING q.id INTO v_id;
  RETURN jsonb_build_object('ok', true, 'deleted', true, 'queue', p_queue, 'existed', v_id IS NOT NULL);
END $$;

-- GET /api/v1/dlq: the tenant's dead letters, newest first, optionally of one queue, one partition
-- and one consumer group; `p_limit` from `p_offset`. A dead letter is per (message, group): the message
-- took more failed deliveries than the queue's retryLimit for that group (queen.log_ack_one_v1,
-- queen.log_lapse_lease_v1). Answers Queen's {messages: [...], pagination: {limit, offset}} and
-- the cell's `total` (how many match, beyond the page). errorMessage is the text the last `failed`
-- ack gave (null when none did, e.g. an expired lease).
CREATE OR REPLACE FUNCTION queen.log_dead_letters_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_limit INT, p_offset INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_out JSONB;
  v_total BIGINT;
BEGIN
  IF p_queue IS NOT NULL AND NOT queen.log_name_ok_v1(p_queue) THEN
    PERFORM queen.fail_v1('log_invalid_queue', 'A queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF p_group IS NOT NULL AND NOT queen.log_name_ok_v1(p_group) THEN
    PERFORM queen.fail_v1('log_invalid_consumer_group', 'A consumer group is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  SELECT count(*) INTO v_total
    FROM queen.message_failures f JOIN queen.partitions p ON p.id = f.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE q.tenant_id = p_tenant AND f.dead_lettered_at IS NOT NULL
     AND (p_queue IS NULL OR q.name = p_queue) AND (p_partition IS NULL OR p.name = p_partition)
     AND (p_group IS NULL OR f.consumer_group = p_group);
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'id', queen.log_message_id_v1(d.partition_id, d.seq), 'transactionId', d.transaction_id,
           'partitionId', d.partition_id, 'queue', d.queue, 'partition', d.partition, 'consumerGroup', d.consumer_group,
           'errorMessage', d.error_message, 'retryCount', d.failures, 'data', d.payload, 'producerSub', NULL,
           'createdAt', queen.ts_v1(d.created_at), 'failedAt', queen.ts_v1(d.dead_lettered_at))
           ORDER BY d.dead_lettered_at DESC, d.partition_id, d.seq), '[]'::jsonb)
    INTO v_out
    FROM (SELECT f.partition_id, f.seq, f.consumer_group, f.failures, f.dead_lettered_at, m.transaction_id, m.payload,
                 m.created_at, q.name AS queue, p.name AS partition, t.error_message
            FROM queen.message_failures f
            JOIN queen.messages m ON m.partition_id = f.partition_id AND m.seq = f.seq
            LEFT JOIN queen.message_failure_texts t
              ON t.partition_id = f.partition_id AND t.consumer_group = f.consumer_group AND t.seq = f.seq
            JOIN queen.partitions p ON p.id = f.partition_id JOIN queen.queues q ON q.id = p.queue_id
           WHERE q.tenant_id = p_tenant AND f.dead_lettered_at IS NOT NULL
             AND (p_queue IS NULL OR q.name = p_queue) AND (p_partition IS NULL OR p.name = p_partition)
     AND (p_group IS NULL OR f.consumer_group = p_group)
           ORDER BY f.dead_lettered_at DESC, f.partition_id, f.seq
           LIMIT p_limit OFFSET p_offset) d;
  RETURN jsonb_build_object('messages', v_out, 'total', v_total, 'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset));
END $$;
