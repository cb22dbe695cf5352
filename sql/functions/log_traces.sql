-- The trace events consumers record against a message (Queen's POST /api/v1/traces, called by its
-- client's message.trace()), and their read. The table is sql/migrations/052_message_traces.sql.

-- The bounds of the traces: per message, and the bytes of one event's data as stored.
CREATE OR REPLACE FUNCTION queen.log_traces_per_message_v1() RETURNS INT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 100 $$;
CREATE OR REPLACE FUNCTION queen.log_trace_max_bytes_v1() RETURNS INT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 16384 $$;

-- POST /api/v1/traces: {transactionId, partitionId, consumerGroup?, eventType? = "info", data,
-- traceNames?: string | [string]}. The message must be the tenant's (else 404-like answer
-- {success: false, error: "not_found"}); at most log_traces_per_message_v1 events per message (the
-- next answers {success: false, error: "trace_limit"} and stores nothing), each data at most
-- log_trace_max_bytes_v1 bytes (400). Answers {success: true, ok: true, traceId}, traceId the
-- event's number on the message.
CREATE OR REPLACE FUNCTION queen.log_record_trace_v1(p_tenant UUID, p_body JSONB) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_txid TEXT := queen.log_str_v1(p_body->'transactionId');
  v_pid TEXT := queen.log_str_v1(p_body->'partitionId');
  v_group TEXT := coalesce(queen.log_str_v1(p_body->'consumerGroup'), '__QUEUE_MODE__');
  v_type TEXT := coalesce(queen.log_str_v1(p_body->'eventType'), 'info');
  v_names TEXT[];
  v_n INT;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF jsonb_typeof(p_body) <> 'object' THEN
    PERFORM queen.fail_v1('invalid_json', 'The request body must be a JSON object.', NULL);
  END IF;
  IF v_txid IS NULL OR v_txid = '' THEN
    PERFORM queen.fail_v1('log_transaction_id_required', 'transactionId is required (a non-empty string).', NULL);
  END IF;
  IF NOT queen.uuid_ok_v1(v_pid) THEN
    PERFORM queen.fail_v1('log_invalid_partition_id', 'partitionId is required: the UUID the pop answered.', NULL);
  END IF;
  PERFORM queen.check_name_v1(v_group, 'log_invalid_consumer_group', 'A consumer group');
  IF NOT p_body ? 'data' THEN
    PERFORM queen.fail_v1('log_invalid_trace', 'data is required (any JSON).', NULL);
  END IF;
  IF octet_length((p_body->'data')::text) > queen.log_trace_max_bytes_v1() THEN
    PERFORM queen.fail_v1('log_invalid_trace', format('data is at most %s bytes as JSON.', queen.log_trace_max_bytes_v1()), NULL);
  END IF;
  IF length(v_type) > 64 THEN
    PERFORM queen.fail_v1('log_invalid_trace', 'eventType is at most 64 characters.', NULL);
  END IF;
  v_names := CASE jsonb_typeof(p_body->'traceNames')
    WHEN 'string' THEN ARRAY[p_body->>'traceNames']
    WHEN 'array' THEN (SELECT array_agg(e #>> '{}') FROM jsonb_array_elements(p_body->'traceNames') e WHERE jsonb_typeof(e) = 'string')
    ELSE '{}' END;
  IF cardinality(v_names) > 16 OR EXISTS (SELECT 1 FROM unnest(v_names) x WHERE length(x) > 256) THEN
    PERFORM queen.fail_v1('log_invalid_trace', 'traceNames is at most 16 names of at most 256 characters each.', NULL);
  END IF;
  -- The message row, locked (NO KEY UPDATE: the foreign-key checks of acks and failures, KEY
  -- SHARE, never wait on it) so two traces of one message take their numbers in turn.
  PERFORM 1 FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE m.partition_id = v_pid::uuid AND m.transaction_id = v_txid AND q.tenant_id = p_tenant FOR NO KEY UPDATE OF m;
  IF NOT FOUND THEN
    RETURN jsonb_build_object('ok', false, 'success', false, 'error', 'not_found');
  END IF;
  SELECT coalesce(max(t.n), 0) INTO v_n FROM queen.message_traces t WHERE t.partition_id = v_pid::uuid AND t.transaction_id = v_txid;
  IF v_n >= queen.log_traces_per_message_v1() THEN
    RETURN jsonb_build_object('ok', false, 'success', false, 'error', 'trace_limit');
  END IF;
  INSERT INTO queen.message_traces (partition_id, transaction_id, n, consumer_group, event_type, trace_names, data)
  VALUES (v_pid::uuid, v_txid, v_n + 1, v_group, v_type, coalesce(v_names, '{}'), p_body->'data');
  RETURN jsonb_build_object('ok', true, 'success', true, 'traceId', v_n + 1);
END $$;

-- GET /api/v1/traces/:partitionId/:transactionId: the message's trace events, oldest first.
CREATE OR REPLACE FUNCTION queen.log_message_traces_v1(p_tenant UUID, p_partition TEXT, p_transaction_id TEXT) RETURNS JSONB
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF NOT queen.uuid_ok_v1(p_partition) THEN
    PERFORM queen.fail_v1('log_invalid_partition_id', 'partitionId is the UUID the pop answered.', NULL);
  END IF;
  RETURN jsonb_build_object('traces', coalesce((
    SELECT jsonb_agg(jsonb_build_object('id', t.n, 'transactionId', t.transaction_id, 'partitionId', t.partition_id,
             'consumerGroup', t.consumer_group, 'eventType', t.event_type, 'traceNames', to_jsonb(t.trace_names), 'data', t.data,
             'createdAt', queen.ts_v1(t.created_at)) ORDER BY t.n)
      FROM queen.message_traces t JOIN queen.partitions p ON p.id = t.partition_id JOIN queen.queues q ON q.id = p.queue_id
     WHERE t.partition_id = p_partition::uuid AND t.transaction_id = p_transaction_id AND q.tenant_id = p_tenant), '[]'::jsonb));
END $$;
