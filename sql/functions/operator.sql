-- The operator's reads and actions (/api/v1/system/..., docs/operator-routes.md): what is in the
-- log, the timers and the KV of one tenant, and the few actions an operator on call takes on them.
-- The routes carry text in and out; every rule of what an action changes is here.
--
-- Bounds: every read is a page of at most queen.operator_max_page_v1() rows, keyset-paged, and no
-- page carries a payload or a value (their size in bytes only); one message answers its payload
-- when it is at most queen.operator_max_payload_bytes_v1() bytes as stored, one key its value
-- (at most 64 KiB, the KV's own bound). The statements run on the message pool, under its time limits.
-- Refusals raise through queen.fail_v1; a missing queue, partition, message or key is
-- operator_not_found (404).

CREATE OR REPLACE FUNCTION queen.operator_max_page_v1() RETURNS INT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1000 $$;
CREATE OR REPLACE FUNCTION queen.operator_max_payload_bytes_v1() RETURNS INT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1048576 $$;
-- How far behind its group's cursor a dead letter may be and still be requeued (below).
CREATE OR REPLACE FUNCTION queen.operator_requeue_max_gap_v1() RETURNS INT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 10000 $$;

-- A page size: NULL is p_default; else 1 to operator_max_page_v1().
CREATE OR REPLACE FUNCTION queen.operator_page_v1(p_limit INT, p_default INT) RETURNS INT
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_limit IS NULL THEN RETURN p_default; END IF;
  IF p_limit < 1 OR p_limit > queen.operator_max_page_v1() THEN
    PERFORM queen.fail_v1('operator_invalid_limit', format('limit is a whole number from 1 to %s.', queen.operator_max_page_v1()), NULL);
  END IF;
  RETURN p_limit;
END $$;

-- A page's cursor: its last row's, when the page is full; a shorter page is the last one (NULL).
CREATE OR REPLACE FUNCTION queen.operator_next_v1(p_rows JSONB, p_limit INT, p_cursor JSONB) RETURNS JSONB
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT CASE WHEN jsonb_array_length(p_rows) = p_limit THEN p_cursor END $$;

-- The tenant's queue, or operator_not_found.
CREATE OR REPLACE FUNCTION queen.operator_queue_v1(p_tenant UUID, p_queue TEXT) RETURNS queen.queues
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_q queen.queues;
BEGIN
  PERFORM queen.check_name_v1(p_queue, 'log_invalid_queue', 'A queue name');
  SELECT * INTO v_q FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  IF v_q.id IS NULL THEN
    PERFORM queen.fail_v1('operator_not_found', format('This tenant has no queue %s.', p_queue), NULL);
  END IF;
  RETURN v_q;
END $$;

-- Per (partition, group) of one queue (or one partition of it): where the group stands. Counted as
-- queen.log_backlog_v2 counts (from the partition's first retained message); a queue no group has
-- read yet shows queue mode (__QUEUE_MODE__) owing everything; p_group asks for that one group
-- alone, whether or not it has read the queue. oldest_at is the creation time of
-- the group's next unfinished message.
CREATE OR REPLACE FUNCTION queen.operator_groups_v1(p_queue_id UUID, p_partition_id UUID, p_group TEXT DEFAULT NULL)
RETURNS TABLE (partition_id UUID, consumer_group TEXT, cursor_seq BIGINT, backlog BIGINT, oldest_at TIMESTAMPTZ,
               lease_expires_at TIMESTAMPTZ, dead_letters BIGINT)
LANGUAGE sql STABLE AS $$
  WITH parts AS (
    SELECT p.id, p.last_seq,
           coalesce((SELECT m0.seq - 1 FROM queen.messages m0 WHERE m0.partition_id = p.id ORDER BY m0.seq LIMIT 1), p.last_seq) AS floor
      FROM queen.partitions p
     WHERE p.queue_id = p_queue_id AND (p_partition_id IS NULL OR p.id = p_partition_id)
  ), groups AS (
    SELECT DISTINCT c.consumer_group FROM queen.partition_consumers c JOIN parts ON parts.id = c.partition_id WHERE p_group IS NULL
    UNION ALL
    SELECT '__QUEUE_MODE__' COLLATE "C" WHERE p_group IS NULL
       AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c JOIN parts ON parts.id = c.partition_id)
    UNION ALL
    SELECT p_group COLLATE "C" WHERE p_group IS NOT NULL
  )
  SELECT p.id, g.consumer_group::text, coalesce(c.cursor_seq, 0),
         greatest(p.last_seq - greatest(coalesce(c.cursor_seq, 0), p.floor)
                  - coalesce((SELECT count(*) FROM unnest(c.done_seqs) d WHERE d > p.floor), 0), 0)::bigint,
         (SELECT m.created_at FROM queen.messages m
           WHERE m.partition_id = p.id AND m.seq > greatest(coalesce(c.cursor_seq, 0), p.floor)
             AND m.seq <> ALL (coalesce(c.done_seqs, '{}')) ORDER BY m.seq LIMIT 1),
         CASE WHEN c.lease_expires_at > clock_timestamp() THEN c.lease_expires_at END,
         (SELECT count(*) FROM queen.message_failures f
           WHERE f.partition_id = p.id AND f.consumer_group = g.consumer_group AND f.dead_lettered_at IS NOT NULL)
    FROM parts p CROSS JOIN groups g
    LEFT JOIN queen.partition_consumers c ON c.partition_id = p.id AND c.consumer_group = g.consumer_group
$$;

-- GET /api/v1/system/queues: the tenant's queues by name, a page at a time (after: the last name
-- of the previous page), each with its partitions' count, dead letters, and per consumer group the
-- backlog and the age of the oldest unconsumed message, summed over the queue's partitions.
CREATE OR REPLACE FUNCTION queen.operator_queues_v1(p_tenant UUID, p_after TEXT, p_limit INT) RETURNS JSONB
LANGUAGE sql STABLE AS $$
  WITH size AS (SELECT queen.operator_page_v1(p_limit, 50) AS n),
  page AS (
    SELECT q.* FROM queen.queues q
     WHERE q.tenant_id = p_tenant AND q.name > coalesce(p_after, '')
     ORDER BY q.name LIMIT (SELECT n FROM size)
  ),
  answer AS (SELECT coalesce(jsonb_agg(jsonb_build_object(
           'name', q.name, 'createdAt', queen.ts_v1(q.created_at), 'leaseTime', q.lease_time, 'retryLimit', q.retry_limit,
           'partitions', (SELECT count(*) FROM queen.partitions p WHERE p.queue_id = q.id),
           'deadLetters', coalesce((SELECT sum(g.dead_letters) FROM queen.operator_groups_v1(q.id, NULL) g), 0),
           'groups', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'consumerGroup', s.consumer_group, 'backlog', s.backlog, 'deadLetters', s.dead_letters,
                        'oldestUnconsumedAt', queen.ts_v1(s.oldest_at),
                        'oldestUnconsumedSeconds', CASE WHEN s.oldest_at IS NOT NULL
                          THEN round(extract(epoch FROM clock_timestamp() - s.oldest_at)::numeric, 3) END)
                        ORDER BY s.consumer_group), '[]'::jsonb)
                        FROM (SELECT g.consumer_group, sum(g.backlog)::bigint AS backlog, sum(g.dead_letters)::bigint AS dead_letters,
                                     min(g.oldest_at) AS oldest_at
                                FROM queen.operator_groups_v1(q.id, NULL) g GROUP BY g.consumer_group) s))
           ORDER BY q.name), '[]'::jsonb) AS r FROM page q)
  SELECT jsonb_build_object('queues', a.r, 'next', queen.operator_next_v1(a.r, s.n, a.r -> -1 -> 'name')) FROM answer a, size s
$$;

-- GET /api/v1/system/queues/:queue/partitions: the queue's partitions by name, a page at a time,
-- each with every group's cursor, backlog, oldest unconsumed message, live lease and dead letters.
CREATE OR REPLACE FUNCTION queen.operator_partitions_v1(p_tenant UUID, p_queue TEXT, p_after TEXT, p_limit INT) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_q queen.queues := queen.operator_queue_v1(p_tenant, p_queue);
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_rows JSONB;
BEGIN
  WITH page AS (
    SELECT p.* FROM queen.partitions p
     WHERE p.queue_id = v_q.id AND p.name > coalesce(p_after, '')
     ORDER BY p.name LIMIT v_limit
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'name', p.name, 'partitionId', p.id, 'lastSeq', p.last_seq, 'createdAt', queen.ts_v1(p.created_at),
           'groups', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'consumerGroup', g.consumer_group, 'cursor', g.cursor_seq, 'backlog', g.backlog,
                        'oldestUnconsumedAt', queen.ts_v1(g.oldest_at),
                        'oldestUnconsumedSeconds', CASE WHEN g.oldest_at IS NOT NULL
                          THEN round(extract(epoch FROM clock_timestamp() - g.oldest_at)::numeric, 3) END,
                        'leaseExpiresAt', queen.ts_v1(g.lease_expires_at), 'deadLetters', g.dead_letters)
                        ORDER BY g.consumer_group), '[]'::jsonb)
                        FROM queen.operator_groups_v1(v_q.id, p.id) g))
           ORDER BY p.name), '[]'::jsonb)
    INTO v_rows FROM page p;
  RETURN jsonb_build_object('queue', v_q.name, 'partitions', v_rows,
                            'next', queen.operator_next_v1(v_rows, v_limit, v_rows -> -1 -> 'name'));
END $$;

-- GET /api/v1/system/queues/:queue/partitions/:partition/messages: the partition's messages by
-- seq, newest first (p_order 'newest', the default) or oldest first, after the seq the previous
-- page ended on. Each payload is answered as its size in bytes only.
CREATE OR REPLACE FUNCTION queen.operator_messages_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_order TEXT, p_after BIGINT, p_limit INT)
RETURNS JSONB LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_q queen.queues := queen.operator_queue_v1(p_tenant, p_queue);
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_order TEXT := coalesce(p_order, 'newest');
  v_pid UUID;
  v_rows JSONB;
BEGIN
  PERFORM queen.check_name_v1(p_partition, 'log_invalid_partition', 'A partition name');
  IF v_order NOT IN ('newest', 'oldest') THEN
    PERFORM queen.fail_v1('operator_invalid_order', 'order is newest or oldest.', NULL);
  END IF;
  SELECT p.id INTO v_pid FROM queen.partitions p WHERE p.queue_id = v_q.id AND p.name = p_partition;
  IF v_pid IS NULL THEN
    PERFORM queen.fail_v1('operator_not_found', format('Queue %s has no partition %s.', p_queue, p_partition), NULL);
  END IF;
  WITH picked AS (
    (SELECT m.* FROM queen.messages m
      WHERE v_order = 'newest' AND m.partition_id = v_pid AND m.seq < coalesce(p_after, 9223372036854775807)
      ORDER BY m.seq DESC LIMIT v_limit)
    UNION ALL
    (SELECT m.* FROM queen.messages m
      WHERE v_order = 'oldest' AND m.partition_id = v_pid AND m.seq > coalesce(p_after, 0)
      ORDER BY m.seq LIMIT v_limit)
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'seq', m.seq, 'id', queen.log_message_id_v1(m.partition_id, m.seq), 'transactionId', m.transaction_id,
           'createdAt', queen.ts_v1(m.created_at), 'bytes', coalesce(pg_column_size(m.payload), 0),
           'sealed', EXISTS (SELECT 1 FROM queen.sealed_messages s WHERE s.partition_id = m.partition_id AND s.seq = m.seq),
           'deadLetters', (SELECT count(*) FROM queen.message_failures f
                            WHERE f.partition_id = m.partition_id AND f.seq = m.seq AND f.dead_lettered_at IS NOT NULL))
           ORDER BY CASE WHEN v_order = 'newest' THEN -m.seq ELSE m.seq END), '[]'::jsonb)
    INTO v_rows FROM picked m;
  RETURN jsonb_build_object('queue', v_q.name, 'partition', p_partition, 'partitionId', v_pid, 'order', v_order,
                            'messages', v_rows,
                            'next', queen.operator_next_v1(v_rows, v_limit, to_jsonb(v_rows -> -1 ->> 'seq')));
END $$;

-- The tenant's message (partitionId, transactionId), or operator_not_found.
CREATE OR REPLACE FUNCTION queen.operator_find_message_v1(p_tenant UUID, p_partition_id TEXT, p_transaction_id TEXT)
RETURNS TABLE (partition_id UUID, seq BIGINT, queue TEXT, partition TEXT, queue_id UUID)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF NOT queen.uuid_ok_v1(p_partition_id) THEN
    PERFORM queen.fail_v1('log_invalid_partition_id', 'partitionId is a partition''s UUID.', NULL);
  END IF;
  IF p_transaction_id IS NULL OR p_transaction_id = '' OR octet_length(p_transaction_id) > queen.log_max_transaction_id_bytes_v1() THEN
    PERFORM queen.fail_v1('log_transaction_id_required',
      format('transactionId is 1 to %s bytes.', queen.log_max_transaction_id_bytes_v1()), NULL);
  END IF;
  RETURN QUERY
    SELECT m.partition_id, m.seq, q.name::text, p.name::text, q.id
      FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
     WHERE m.partition_id = p_partition_id::uuid AND m.transaction_id = p_transaction_id AND q.tenant_id = p_tenant;
  IF NOT FOUND THEN
    PERFORM queen.fail_v1('operator_not_found', 'This tenant has no message with that partitionId and transactionId.', NULL);
  END IF;
END $$;

-- GET /api/v1/system/partitions/:partitionId/messages/:transactionId: one message, its payload
-- (as stored: a sealed payload is marked "sealed": true for the API to open; past
-- operator_max_payload_bytes_v1, data is null and dataOmitted true), and where each group that has
-- the partition stands with it: consumed, deadLettered, leased or pending, with its failures.
CREATE OR REPLACE FUNCTION queen.operator_message_v1(p_tenant UUID, p_partition_id TEXT, p_transaction_id TEXT) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_m RECORD;
  v_out JSONB;
BEGIN
  SELECT * INTO v_m FROM queen.operator_find_message_v1(p_tenant, p_partition_id, p_transaction_id);
  SELECT jsonb_build_object(
           'id', queen.log_message_id_v1(m.partition_id, m.seq), 'seq', m.seq, 'transactionId', m.transaction_id,
           'partitionId', m.partition_id, 'queue', v_m.queue, 'partition', v_m.partition, 'createdAt', queen.ts_v1(m.created_at),
           'traceId', m.trace_id, 'traceparent', queen.log_traceparent_v1(m.trace_id, m.span_id),
           'bytes', coalesce(octet_length(m.payload::text), 0),
           'data', CASE WHEN coalesce(octet_length(m.payload::text), 0) <= queen.operator_max_payload_bytes_v1() THEN m.payload END,
           'dataOmitted', coalesce(octet_length(m.payload::text), 0) > queen.operator_max_payload_bytes_v1(),
           'groups', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'consumerGroup', c.consumer_group,
                        'state', CASE WHEN f.dead_lettered_at IS NOT NULL THEN 'deadLettered'
                                      WHEN m.seq <= c.cursor_seq OR m.seq = ANY (c.done_seqs) THEN 'consumed'
                                      WHEN c.lease_expires_at > clock_timestamp() AND m.seq = ANY (c.lease_seqs) THEN 'leased'
                                      ELSE 'pending' END,
                        'failures', coalesce(f.failures, 0), 'lastFailedAt', queen.ts_v1(f.last_failed_at),
                        'deadLetteredAt', queen.ts_v1(f.dead_lettered_at), 'errorMessage', t.error_message)
                        ORDER BY c.consumer_group), '[]'::jsonb)
                        FROM (SELECT * FROM queen.partition_consumers c0 WHERE c0.partition_id = m.partition_id
                               ORDER BY c0.consumer_group LIMIT queen.operator_max_page_v1()) c
                        LEFT JOIN queen.message_failures f ON f.partition_id = c.partition_id AND f.consumer_group = c.consumer_group AND f.seq = m.seq
                        LEFT JOIN queen.message_failure_texts t ON t.partition_id = c.partition_id AND t.consumer_group = c.consumer_group AND t.seq = m.seq))
         || CASE WHEN EXISTS (SELECT 1 FROM queen.sealed_messages s WHERE s.partition_id = m.partition_id AND s.seq = m.seq)
                 THEN '{"sealed": true}'::jsonb ELSE '{"sealed": false}'::jsonb END
    INTO v_out
    FROM queen.messages m WHERE m.partition_id = v_m.partition_id AND m.seq = v_m.seq;
  RETURN v_out;
END $$;

-- GET /api/v1/system/timers: the tenant's timers (of one queue, or all), by deliverAt then timerId,
-- keyset-paged with timers_list_v1's cursor. p_state: all (default), due (deliverAt now or
-- earlier), late (due for more than p_late_seconds, default 60: the sweeper has not fired it
-- in that time), pending (not yet due). Payloads as their size only.
CREATE OR REPLACE FUNCTION queen.operator_timers_v1(p_tenant UUID, p_queue TEXT, p_state TEXT, p_late_seconds INT, p_after TEXT, p_limit INT)
RETURNS JSONB LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_state TEXT := coalesce(p_state, 'all');
  v_now TIMESTAMPTZ := clock_timestamp();
  v_late TIMESTAMPTZ;
  v_at TIMESTAMPTZ;
  v_id UUID;
  v_rows JSONB;
BEGIN
  IF p_queue IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_queue, 'timers_invalid_queue', 'A queue name');
  END IF;
  IF v_state NOT IN ('all', 'due', 'late', 'pending') THEN
    PERFORM queen.fail_v1('operator_invalid_state', 'state is all, due, late or pending.', NULL);
  END IF;
  IF p_late_seconds IS NOT NULL AND (p_late_seconds < 0 OR p_late_seconds > 86400) THEN
    PERFORM queen.fail_v1('operator_invalid_state', 'lateSeconds is a whole number from 0 to 86400.', NULL);
  END IF;
  v_late := v_now - make_interval(secs => coalesce(p_late_seconds, 60));
  SELECT c.at, c.id INTO v_at, v_id FROM queen.timers_cursor_v1(p_after) c;
  WITH page AS (
    SELECT t.* FROM queen.log_timers t
     WHERE t.tenant_id = p_tenant AND (p_queue IS NULL OR t.queue = p_queue)
       AND (t.deliver_at, t.timer_id) > (v_at, v_id)
       AND CASE v_state WHEN 'due' THEN t.deliver_at <= v_now WHEN 'late' THEN t.deliver_at <= v_late
                        WHEN 'pending' THEN t.deliver_at > v_now ELSE true END
     ORDER BY t.deliver_at, t.timer_id LIMIT v_limit
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'timerId', t.timer_id, 'timerKey', t.timer_key, 'queue', t.queue, 'partition', t.partition,
           'deliverAt', queen.ts_v1(t.deliver_at), 'createdAt', queen.ts_v1(t.created_at),
           'bytes', pg_column_size(t.payload), 'due', t.deliver_at <= v_now, 'late', t.deliver_at <= v_late)
           ORDER BY t.deliver_at, t.timer_id), '[]'::jsonb)
    INTO v_rows FROM page t;
  RETURN jsonb_build_object('timers', v_rows, 'now', queen.ts_v1(v_now),
    'next', queen.operator_next_v1(v_rows, v_limit, to_jsonb((v_rows -> -1 ->> 'deliverAt') || ',' || (v_rows -> -1 ->> 'timerId'))));
END $$;

-- GET /api/v1/system/kv/:ns: the namespace's live keys under a prefix ('' or NULL: all), in byte
-- order after `after`, each with its version, expiry and value size; never a value.
CREATE OR REPLACE FUNCTION queen.operator_kv_keys_v1(p_tenant UUID, p_ns TEXT, p_prefix TEXT, p_after TEXT, p_limit INT) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_prefix TEXT := coalesce(p_prefix, '');
  v_upper TEXT;
  v_now TIMESTAMPTZ := clock_timestamp();
  v_rows JSONB;
BEGIN
  PERFORM queen.check_name_v1(p_ns, 'kv_invalid_namespace', 'A namespace');
  IF octet_length(v_prefix) > queen.kv_max_key_bytes_v1() OR octet_length(coalesce(p_after, '')) > queen.kv_max_key_bytes_v1() THEN
    PERFORM queen.fail_v1('kv_key_too_long', format('A prefix or after is at most %s bytes, the longest key.', queen.kv_max_key_bytes_v1()), NULL);
  END IF;
  v_upper := CASE WHEN v_prefix = '' THEN NULL
                  ELSE coalesce(queen.kv_prefix_upper_v1(v_prefix), v_prefix || repeat(chr(1114111), queen.kv_max_key_bytes_v1() / 4 + 1)) END;
  WITH page AS (
    SELECT kv.key, kv.version, kv.expires_at, kv.updated_at, pg_column_size(kv.value) AS bytes FROM queen.kv kv
     WHERE kv.tenant_id = p_tenant AND kv.namespace = p_ns
       AND kv.key >= v_prefix AND kv.key > coalesce(p_after, '') AND (v_upper IS NULL OR kv.key < v_upper)
       AND starts_with(kv.key, v_prefix) AND queen.kv_live_v1(kv.expires_at, v_now)
     ORDER BY kv.key LIMIT v_limit
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object('key', k.key, 'version', k.version, 'expiresAt', queen.ts_v1(k.expires_at),
                                               'updatedAt', queen.ts_v1(k.updated_at), 'bytes', k.bytes) ORDER BY k.key), '[]'::jsonb)
    INTO v_rows FROM page k;
  RETURN jsonb_build_object('namespace', p_ns, 'prefix', v_prefix, 'keys', v_rows,
                            'next', queen.operator_next_v1(v_rows, v_limit, v_rows -> -1 -> 'key'));
END $$;

CREATE OR REPLACE FUNCTION queen.operator_check_key_v1(p_ns TEXT, p_key TEXT) RETURNS VOID
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  PERFORM queen.check_name_v1(p_ns, 'kv_invalid_namespace', 'A namespace');
  IF p_key IS NULL OR p_key = '' THEN
    PERFORM queen.fail_v1('kv_key_required', format('A key is 1 to %s bytes of UTF-8.', queen.kv_max_key_bytes_v1()), NULL);
  END IF;
  IF NOT queen.kv_key_ok_v1(p_key) THEN
    PERFORM queen.fail_v1('kv_key_too_long', format('The key is %s bytes of UTF-8; at most %s are allowed.',
      octet_length(p_key), queen.kv_max_key_bytes_v1()), NULL);
  END IF;
END $$;

-- GET /api/v1/system/kv/:ns/keys/:key: one live key with its value.
CREATE OR REPLACE FUNCTION queen.operator_kv_key_v1(p_tenant UUID, p_ns TEXT, p_key TEXT) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_out JSONB;
BEGIN
  PERFORM queen.operator_check_key_v1(p_ns, p_key);
  SELECT jsonb_build_object('namespace', kv.namespace, 'key', kv.key, 'value', kv.value, 'version', kv.version,
                            'expiresAt', queen.ts_v1(kv.expires_at), 'createdAt', queen.ts_v1(kv.created_at),
                            'updatedAt', queen.ts_v1(kv.updated_at), 'bytes', octet_length(kv.value::text))
    INTO v_out
    FROM queen.kv kv
   WHERE kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = p_key AND queen.kv_live_v1(kv.expires_at, clock_timestamp());
  IF v_out IS NULL THEN
    PERFORM queen.fail_v1('operator_not_found', format('Namespace %s has no live key of that name.', p_ns), NULL);
  END IF;
  RETURN v_out;
END $$;

-- GET /api/v1/system/tenants: every tenant the cell knows of (a grant row, a usage measurement or
-- a queue), by id after p_after, or only p_only; each with its grant and limits (queen.kv_quota),
-- the sweeper's last measurement (queen.kv_usage), its queue count, and whether the measurement
-- is over a limit. The API adds the rate limits, which are its configuration.
CREATE OR REPLACE FUNCTION queen.operator_tenants_v1(p_only UUID, p_after UUID, p_limit INT) RETURNS JSONB
LANGUAGE sql STABLE AS $$
  WITH size AS (SELECT queen.operator_page_v1(p_limit, 100) AS n),
  ids AS (
    SELECT t.tenant_id FROM (
      (SELECT k.tenant_id FROM queen.kv_quota k WHERE k.tenant_id > coalesce(p_after, '00000000-0000-0000-0000-000000000000')
         AND (p_only IS NULL OR k.tenant_id = p_only) ORDER BY 1 LIMIT (SELECT n FROM size))
      UNION
      (SELECT u.tenant_id FROM queen.kv_usage u WHERE u.tenant_id > coalesce(p_after, '00000000-0000-0000-0000-000000000000')
         AND (p_only IS NULL OR u.tenant_id = p_only) ORDER BY 1 LIMIT (SELECT n FROM size))
      UNION
      (SELECT DISTINCT q.tenant_id FROM queen.queues q WHERE q.tenant_id > coalesce(p_after, '00000000-0000-0000-0000-000000000000')
         AND (p_only IS NULL OR q.tenant_id = p_only) ORDER BY 1 LIMIT (SELECT n FROM size))
    ) t ORDER BY 1 LIMIT (SELECT n FROM size)
  ),
  answer AS (SELECT coalesce(jsonb_agg(jsonb_build_object(
           'tenantId', i.tenant_id,
           'grant', CASE WHEN k.tenant_id IS NOT NULL THEN jsonb_build_object(
                      'granted', k.granted, 'enabled', k.enabled, 'maxRows', k.max_rows, 'maxBytes', k.max_bytes,
                      'maxTimers', k.max_timers, 'updatedAt', queen.ts_v1(k.updated_at)) END,
           'usage', CASE WHEN u.tenant_id IS NOT NULL THEN jsonb_build_object(
                      'rows', u.rows, 'bytes', u.bytes, 'timers', u.timers, 'timerBytes', u.timer_bytes,
                      'computedAt', queen.ts_v1(u.computed_at)) END,
           'queues', (SELECT count(*) FROM queen.queues q WHERE q.tenant_id = i.tenant_id),
           'overQuota', coalesce(u.rows >= k.max_rows OR u.bytes >= k.max_bytes OR u.timers >= k.max_timers, false))
           ORDER BY i.tenant_id), '[]'::jsonb) AS r
    FROM ids i LEFT JOIN queen.kv_quota k ON k.tenant_id = i.tenant_id LEFT JOIN queen.kv_usage u ON u.tenant_id = i.tenant_id)
  SELECT jsonb_build_object('tenants', a.r, 'next', queen.operator_next_v1(a.r, s.n, a.r -> -1 -> 'tenantId')) FROM answer a, size s
$$;

-- Actions. Each takes the rows it changes in the order the consumers' own statements take them
-- (partition_consumers, then the message's failure rows), and is idempotent: done twice, the
-- second finds nothing left to do and says so.

-- Requeues one dead letter (partition, group, seq): the group has it to do again, with a fresh
-- count of failures. The message is finished for the group, so the group's cursor is moved back to
-- just before it and the messages it had finished since are kept as finished (done_seqs), so only
-- this one comes back; one still ahead of the cursor simply leaves done_seqs. A live lease that
-- handed the message out counts it as settled (lease_failed), so its lapse does not count it again.
-- Refused ('cursor_too_far') when that would leave more than operator_requeue_max_gap_v1()
-- finished messages ahead of the cursor: every pop of the group reads that list.
CREATE OR REPLACE FUNCTION queen.operator_requeue_one_v1(p_partition_id UUID, p_group TEXT, p_seq BIGINT) RETURNS TEXT
LANGUAGE plpgsql AS $$
DECLARE
  v_pc queen.partition_consumers;
BEGIN
  SELECT * INTO v_pc FROM queen.partition_consumers c
   WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group FOR UPDATE;
  PERFORM 1 FROM queen.message_failures f
   WHERE f.partition_id = p_partition_id AND f.consumer_group = p_group AND f.seq = p_seq AND f.dead_lettered_at IS NOT NULL
   FOR UPDATE;
  IF NOT FOUND THEN RETURN 'absent'; END IF;
  IF v_pc.partition_id IS NOT NULL THEN
    IF p_seq <= v_pc.cursor_seq THEN
      IF v_pc.cursor_seq - p_seq + cardinality(v_pc.done_seqs) > queen.operator_requeue_max_gap_v1() THEN
        RETURN 'cursor_too_far';
      END IF;
      v_pc.done_seqs := v_pc.done_seqs || ARRAY(SELECT generate_series(p_seq + 1, v_pc.cursor_seq));
      v_pc.cursor_seq := p_seq - 1;
    ELSE
      v_pc.done_seqs := array_remove(v_pc.done_seqs, p_seq);
    END IF;
    IF p_seq = ANY (v_pc.lease_seqs) AND NOT p_seq = ANY (v_pc.lease_failed) THEN
      v_pc.lease_failed := v_pc.lease_failed || p_seq;
    END IF;
    UPDATE queen.partition_consumers
       SET cursor_seq = v_pc.cursor_seq, done_seqs = v_pc.done_seqs, lease_failed = v_pc.lease_failed, updated_at = clock_timestamp()
     WHERE partition_id = p_partition_id AND consumer_group = p_group;
    -- The group is behind here again: its queue forgets it, and its next pop registers it, making
    -- this partition ready if a sweeper settled it (queen.log_register_group_v1).
    DELETE FROM queen.consumer_groups g USING queen.partitions p
     WHERE p.id = p_partition_id AND g.queue_id = p.queue_id AND g.consumer_group = p_group;
  END IF;
  DELETE FROM queen.message_failure_texts WHERE partition_id = p_partition_id AND consumer_group = p_group AND seq = p_seq;
  DELETE FROM queen.message_failures WHERE partition_id = p_partition_id AND consumer_group = p_group AND seq = p_seq;
  RETURN 'requeued';
END $$;

-- Discards one dead letter: the group keeps it finished, and it leaves the dead-letter list.
CREATE OR REPLACE FUNCTION queen.operator_discard_one_v1(p_partition_id UUID, p_group TEXT, p_seq BIGINT) RETURNS TEXT
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM queen.partition_consumers c WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group FOR UPDATE;
  DELETE FROM queen.message_failure_texts t WHERE t.partition_id = p_partition_id AND t.consumer_group = p_group AND t.seq = p_seq
     AND EXISTS (SELECT 1 FROM queen.message_failures f WHERE f.partition_id = t.partition_id AND f.consumer_group = t.consumer_group
                   AND f.seq = t.seq AND f.dead_lettered_at IS NOT NULL);
  DELETE FROM queen.message_failures f
   WHERE f.partition_id = p_partition_id AND f.consumer_group = p_group AND f.seq = p_seq AND f.dead_lettered_at IS NOT NULL;
  RETURN CASE WHEN FOUND THEN 'discarded' ELSE 'absent' END;
END $$;

-- POST /api/v1/system/partitions/:partitionId/messages/:transactionId/requeue and /discard: the
-- message's dead letters, of one group or of every group it is dead-lettered in. Answers each
-- group's outcome; a message with none answers an empty list.
CREATE OR REPLACE FUNCTION queen.operator_dead_letter_v1(p_tenant UUID, p_action TEXT, p_partition_id TEXT, p_transaction_id TEXT, p_group TEXT)
RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_m RECORD;
  v_g TEXT;
  v_out JSONB := '[]'::jsonb;
BEGIN
  IF p_group IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  END IF;
  SELECT * INTO v_m FROM queen.operator_find_message_v1(p_tenant, p_partition_id, p_transaction_id);
  FOR v_g IN
    SELECT f.consumer_group FROM queen.message_failures f
     WHERE f.partition_id = v_m.partition_id AND f.seq = v_m.seq AND f.dead_lettered_at IS NOT NULL
       AND (p_group IS NULL OR f.consumer_group = p_group)
     ORDER BY f.consumer_group
  LOOP
    v_out := v_out || jsonb_build_object('consumerGroup', v_g, 'outcome',
      CASE p_action WHEN 'requeue' THEN queen.operator_requeue_one_v1(v_m.partition_id, v_g, v_m.seq)
                    ELSE queen.operator_discard_one_v1(v_m.partition_id, v_g, v_m.seq) END);
  END LOOP;
  RETURN jsonb_build_object('queue', v_m.queue, 'partition', v_m.partition, 'partitionId', v_m.partition_id,
                            'transactionId', p_transaction_id, 'action', p_action, 'groups', v_out);
END $$;

-- POST /api/v1/system/queues/:queue/dead-letters/requeue and /discard: up to p_limit (1 to
-- operator_max_page_v1, default 100) of the queue's dead letters (of one group, or all), oldest
-- first; `remaining` says how many are left, so a caller repeats until it is 0 (or only the
-- cursor_too_far ones are left).
CREATE OR REPLACE FUNCTION queen.operator_dead_letters_v1(p_tenant UUID, p_action TEXT, p_queue TEXT, p_group TEXT, p_limit INT)
RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_q queen.queues := queen.operator_queue_v1(p_tenant, p_queue);
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_r RECORD;
  v_outcome TEXT;
  v_done INT := 0;
  v_far INT := 0;
  v_remaining BIGINT;
BEGIN
  IF p_group IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  END IF;
  FOR v_r IN
    SELECT d.partition_id, d.consumer_group, d.seq FROM (
      SELECT f.partition_id, f.consumer_group, f.seq, f.dead_lettered_at FROM queen.message_failures f
        JOIN queen.partitions p ON p.id = f.partition_id
       WHERE p.queue_id = v_q.id AND f.dead_lettered_at IS NOT NULL AND (p_group IS NULL OR f.consumer_group = p_group)
       ORDER BY f.dead_lettered_at, f.partition_id, f.seq LIMIT v_limit) d
     ORDER BY d.partition_id, d.consumer_group, d.seq
  LOOP
    v_outcome := CASE p_action WHEN 'requeue' THEN queen.operator_requeue_one_v1(v_r.partition_id, v_r.consumer_group, v_r.seq)
                               ELSE queen.operator_discard_one_v1(v_r.partition_id, v_r.consumer_group, v_r.seq) END;
    IF v_outcome IN ('requeued', 'discarded') THEN v_done := v_done + 1; END IF;
    IF v_outcome = 'cursor_too_far' THEN v_far := v_far + 1; END IF;
  END LOOP;
  SELECT count(*) INTO v_remaining FROM queen.message_failures f JOIN queen.partitions p ON p.id = f.partition_id
   WHERE p.queue_id = v_q.id AND f.dead_lettered_at IS NOT NULL AND (p_group IS NULL OR f.consumer_group = p_group);
  RETURN jsonb_build_object('queue', v_q.name, 'consumerGroup', p_group, 'action', p_action,
    CASE p_action WHEN 'requeue' THEN 'requeued' ELSE 'discarded' END, v_done, 'cursorTooFar', v_far, 'remaining', v_remaining);
END $$;

-- POST /api/v1/system/timers/:timerId/cancel and /reschedule: the timers' own rules
-- (queen.timers_apply_v1), whatever the switches say: an operator's hand is not paused.
CREATE OR REPLACE FUNCTION queen.operator_timer_v1(p_tenant UUID, p_action TEXT, p_timer_id TEXT, p_body JSONB) RETURNS JSONB
LANGUAGE plpgsql AS $$
BEGIN
  IF NOT queen.uuid_ok_v1(p_timer_id) THEN
    PERFORM queen.fail_v1('timers_invalid_timer_id', 'The timer id is a UUID.', NULL);
  END IF;
  IF p_body IS NOT NULL AND jsonb_typeof(p_body) <> 'object' THEN
    PERFORM queen.fail_v1('timers_invalid_field', 'The body is a JSON object: deliverAt or delaySeconds.', NULL);
  END IF;
  IF coalesce(p_body, '{}'::jsonb) ?| ARRAY['op', 'timerId'] THEN
    PERFORM queen.fail_v1('timers_body_conflicts_with_path', 'The path names the operation and the timer; the body gives only when.', NULL);
  END IF;
  RETURN queen.timers_apply_v1(p_tenant, jsonb_build_array(
    CASE p_action WHEN 'cancel' THEN '{}'::jsonb ELSE coalesce(p_body, '{}'::jsonb) END
    || jsonb_build_object('op', p_action, 'timerId', p_timer_id))) -> 0;
END $$;

-- DELETE /api/v1/system/kv/:ns/keys/:key: the KV's own delete (queen.kv_delete_key_v1).
CREATE OR REPLACE FUNCTION queen.operator_kv_delete_v1(p_tenant UUID, p_ns TEXT, p_key TEXT) RETURNS JSONB
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM queen.operator_check_key_v1(p_ns, p_key);
  RETURN jsonb_build_object('namespace', p_ns, 'key', p_key,
    'deleted', (queen.kv_delete_key_v1(p_tenant, 0, 'delete', p_ns, p_key, NULL, clock_timestamp()) ->> 'applied')::boolean);
END $$;

-- POST /api/v1/system/queues/:queue/consumer-groups/:group/skip: the group's cursor on every
-- partition of the queue (or one) moves to the partition's last message, as if it had consumed
-- everything stored until now; its live leases end (an ack under one answers already_acked) and
-- its retry waits go. A partition the group never read gets its row, starting at the end (as
-- subscriptionMode new would). Dead letters stay listed. Answers how many messages it skipped.
CREATE OR REPLACE FUNCTION queen.operator_skip_v1(p_tenant UUID, p_queue TEXT, p_group TEXT, p_partition TEXT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_q queen.queues := queen.operator_queue_v1(p_tenant, p_queue);
  v_skipped BIGINT;
  v_n INT;
BEGIN
  PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  IF p_partition IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_partition, 'log_invalid_partition', 'A partition name');
    IF NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.queue_id = v_q.id AND p.name = p_partition) THEN
      PERFORM queen.fail_v1('operator_not_found', format('Queue %s has no partition %s.', p_queue, p_partition), NULL);
    END IF;
  END IF;
  PERFORM 1 FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
   WHERE p.queue_id = v_q.id AND (p_partition IS NULL OR p.name = p_partition) AND c.consumer_group = p_group
   ORDER BY c.partition_id FOR UPDATE OF c;
  SELECT coalesce(sum(g.backlog), 0) INTO v_skipped
    FROM queen.partitions p, queen.operator_groups_v1(v_q.id, p.id, p_group) g
   WHERE p.queue_id = v_q.id AND (p_partition IS NULL OR p.name = p_partition);
  WITH moved AS (
    INSERT INTO queen.partition_consumers AS c (partition_id, consumer_group, cursor_seq)
    SELECT p.id, p_group, p.last_seq FROM queen.partitions p
     WHERE p.queue_id = v_q.id AND (p_partition IS NULL OR p.name = p_partition)
     ORDER BY p.id
     -- A partition being removed (retention, or its queue's delete) is waited for and skipped.
     FOR KEY SHARE OF p
    ON CONFLICT (partition_id, consumer_group) DO UPDATE
       SET cursor_seq = greatest(c.cursor_seq, EXCLUDED.cursor_seq), done_seqs = '{}', lease_id = NULL, lease_expires_at = NULL,
           lease_seqs = '{}', lease_failed = '{}', updated_at = clock_timestamp()
    RETURNING 1)
  SELECT count(*) INTO v_n FROM moved;
  DELETE FROM queen.consumer_retry_at r USING queen.partitions p
   WHERE r.partition_id = p.id AND p.queue_id = v_q.id AND (p_partition IS NULL OR p.name = p_partition) AND r.consumer_group = p_group;
  RETURN jsonb_build_object('queue', v_q.name, 'consumerGroup', p_group, 'partition', p_partition, 'partitions', v_n, 'skipped', v_skipped);
END $$;

-- ---- The console's overview (services/api/console): the cell's state from its own tables ----------
--
-- What a sweeper tells the cell about itself, for the console's overview: the shedding ladder's rung
-- (services/sweeper/pressure.ts: 0 calm, 1 pruning suspended, 2 pruning and the usage rollup
-- suspended), its batch and sleep, in queen.system_state under 'sweeper:<its id>' (the table of
-- cell-wide facts; the switches read only their three keys). The rung lived only in the sweeper's
-- memory and in its Prometheus gauge; the shard rows it writes (queen.sweeper_shards) are not
-- written at all while pruning is shed, so they cannot carry it. p_state NULL: the sweeper stops,
-- its row goes. Rows not written for an hour (a sweeper that died) go at the next report of any
-- sweeper, so the rows are bounded by the sweepers of the last hour.
--
-- The same call samples the log's counters for the overview's throughput, at most once every
-- p_sample_seconds cell-wide (the sweeper that finds the sample row free and old enough takes it;
-- SKIP LOCKED, so sweepers never wait on each other): queen.log_totals_v1, the messages ever pushed,
-- the completed acks and the failed deliveries (failed acks and expired leases), which retention's
-- removal of partitions and group rows does not lower, with the time, kept for 10 minutes (at most
-- 120 samples) in 'log_throughput'. A sample is one pass over partitions and partition_consumers, the rows the
-- log's gauges already pass over every 15 s. Nothing here is worth an fsync: a report lost in a
-- crash is rewritten by the next.
CREATE OR REPLACE FUNCTION queen.sweeper_report_v1(p_worker TEXT, p_state JSONB, p_sample_seconds INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_samples JSONB;
  v_at TIMESTAMPTZ;
  v_sample JSONB;
BEGIN
  SET LOCAL synchronous_commit = off;
  IF p_worker IS NULL OR length(p_worker) > 512 THEN
    PERFORM queen.fail_v1('bad_request', 'A sweeper id is 1 to 512 characters.', NULL);
  END IF;
  IF p_state IS NULL THEN
    DELETE FROM queen.system_state WHERE key = 'sweeper:' || p_worker;
    RETURN jsonb_build_object('sampled', false);
  END IF;
  INSERT INTO queen.system_state (key, value, updated_at) VALUES ('sweeper:' || p_worker, p_state, now())
  ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;
  DELETE FROM queen.system_state WHERE key LIKE 'sweeper:%' AND updated_at < now() - interval '1 hour';

  INSERT INTO queen.system_state (key, value, updated_at) VALUES ('log_throughput', '[]', '-infinity')
  ON CONFLICT (key) DO NOTHING;
  SELECT s.value, s.updated_at INTO v_samples, v_at FROM queen.system_state s
   WHERE s.key = 'log_throughput' FOR UPDATE SKIP LOCKED;
  IF NOT FOUND OR v_at > now() - make_interval(secs => greatest(1, p_sample_seconds)) THEN
    RETURN jsonb_build_object('sampled', false);
  END IF;
  v_sample := jsonb_build_object('atMs', (extract(epoch FROM now()) * 1000)::bigint) || queen.log_totals_v1();
  SELECT coalesce(jsonb_agg(e ORDER BY (e ->> 'atMs')::bigint), '[]'::jsonb) INTO v_samples FROM (
    SELECT e FROM jsonb_array_elements(CASE WHEN jsonb_typeof(v_samples) = 'array' THEN v_samples ELSE '[]' END) e
     WHERE (e ->> 'atMs')::bigint >= (extract(epoch FROM now() - interval '10 minutes') * 1000)::bigint
     ORDER BY (e ->> 'atMs')::bigint DESC LIMIT 119) kept;
  UPDATE queen.system_state SET value = v_samples || v_sample, updated_at = now() WHERE key = 'log_throughput';
  RETURN jsonb_build_object('sampled', true);
END $$;

-- The overview's cell-wide state in one read (the console's /console): the sweepers heard from in
-- the last hour with their rung and how long ago they reported; the throughput over the last
-- minute and the last 5 minutes from the sweepers' samples (above: the newest sample against the
-- newest one at least that much older, or the oldest there is, with the span it covers); the
-- timers due now and late (due p_late_seconds, default 60, or more: the timers page's "late"),
-- each counted up to 100,000, and the oldest due one's age; and the connections to this database
-- by application_name and state (pg_stat_activity: every worker's pools, the sweepers', the
-- listeners'), with the server's max_connections. Bounded: 50 sweepers, 50 connection groups, two
-- index-bounded counts, no scan of the log.
CREATE OR REPLACE FUNCTION queen.operator_overview_v1(p_late_seconds INT) RETURNS JSONB
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_now TIMESTAMPTZ := now();
  v_late TIMESTAMPTZ;
  v_samples JSONB;
  v_newest JSONB;
  v_windows JSONB := '{}';
  v_then JSONB;
  v_w INT;
BEGIN
  IF p_late_seconds IS NOT NULL AND (p_late_seconds < 0 OR p_late_seconds > 86400) THEN
    PERFORM queen.fail_v1('operator_invalid_state', 'lateSeconds is a whole number from 0 to 86400.', NULL);
  END IF;
  v_late := v_now - make_interval(secs => coalesce(p_late_seconds, 60));
  SELECT s.value INTO v_samples FROM queen.system_state s WHERE s.key = 'log_throughput';
  IF jsonb_typeof(v_samples) = 'array' AND jsonb_array_length(v_samples) > 0 THEN
    v_newest := v_samples -> -1;
    FOREACH v_w IN ARRAY ARRAY[60, 300] LOOP
      SELECT e INTO v_then FROM jsonb_array_elements(v_samples) e
       WHERE (e ->> 'atMs')::bigint <= (v_newest ->> 'atMs')::bigint - v_w * 1000
       ORDER BY (e ->> 'atMs')::bigint DESC LIMIT 1;
      IF v_then IS NULL THEN v_then := v_samples -> 0; END IF;
      v_windows := v_windows || jsonb_build_object(v_w::text, CASE WHEN v_then = v_newest THEN NULL ELSE jsonb_build_object(
        'spanSeconds', ((v_newest ->> 'atMs')::bigint - (v_then ->> 'atMs')::bigint) / 1000,
        'pushed', greatest(0, (v_newest ->> 'pushed')::bigint - (v_then ->> 'pushed')::bigint),
        'completed', greatest(0, (v_newest ->> 'completed')::bigint - (v_then ->> 'completed')::bigint),
        'failed', greatest(0, (v_newest ->> 'failed')::bigint - (v_then ->> 'failed')::bigint)) END);
      v_then := NULL;
    END LOOP;
  END IF;
  RETURN jsonb_build_object(
    'now', queen.ts_v1(v_now),
    'sweepers', (SELECT coalesce(jsonb_agg(x.r ORDER BY x.key), '[]'::jsonb) FROM (
        SELECT s.key, jsonb_build_object('id', substr(s.key, 9), 'reportedAt', queen.ts_v1(s.updated_at),
                 'silentSeconds', floor(extract(epoch FROM v_now - s.updated_at))::int) || s.value AS r
          FROM queen.system_state s WHERE s.key LIKE 'sweeper:%' AND s.updated_at >= v_now - interval '1 hour'
         ORDER BY s.key LIMIT 50) x),
    'throughput', CASE WHEN v_newest IS NULL THEN NULL ELSE jsonb_build_object(
        'sampledAt', queen.ts_v1(to_timestamp((v_newest ->> 'atMs')::bigint / 1000.0)),
        'lastMinute', v_windows -> '60', 'last5Minutes', v_windows -> '300') END,
    'timers', jsonb_build_object(
        'due', (SELECT count(*) FROM (SELECT 1 FROM queen.log_timers t WHERE t.deliver_at <= v_now LIMIT 100000) d),
        'late', (SELECT count(*) FROM (SELECT 1 FROM queen.log_timers t WHERE t.deliver_at <= v_late LIMIT 100000) l),
        'countedUpTo', 100000,
        'lateSeconds', coalesce(p_late_seconds, 60),
        'oldestDueSeconds', (SELECT floor(extract(epoch FROM v_now - t.deliver_at))::bigint FROM queen.log_timers t
                              WHERE t.deliver_at <= v_now ORDER BY t.deliver_at LIMIT 1)),
    'connections', jsonb_build_object(
        'maxConnections', current_setting('max_connections')::int,
        'server', (SELECT count(*) FROM pg_stat_activity a WHERE a.backend_type = 'client backend'),
        'groups', (SELECT coalesce(jsonb_agg(g.r ORDER BY g.app, g.state), '[]'::jsonb) FROM (
            SELECT coalesce(a.application_name, '') AS app, coalesce(a.state, '') AS state,
                   jsonb_build_object('applicationName', coalesce(a.application_name, ''), 'state', coalesce(a.state, ''), 'connections', count(*)) AS r
              FROM pg_stat_activity a
             WHERE a.datname = current_database() AND a.backend_type = 'client backend'
             GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 50) g)));
END $$;

-- The console's sign-in limit, per cell (every worker and process of the cell counts into the same
-- row): past p_limit wrong tokens from one peer address within p_window_seconds of the first, that
-- address is refused (the right token included) until the window is over. The count lives in the
-- cell's rate buckets (queen.kv_rate_bucket, UNLOGGED: a crash forgets it, as a restart forgot the
-- per-worker count before) under scope 'console_login', the address in the tenant column (never a
-- tenant's UUID form). p_failed: this attempt gave a wrong token, so it counts (unless refused).
-- Bounded: a new window first removes up to 1,000 finished windows, and past 10,000 live rows (a
-- flood of addresses) the scope's rows are cleared rather than grown, as the worker's book was.
CREATE OR REPLACE FUNCTION queen.console_login_v1(p_peer TEXT, p_failed BOOLEAN, p_limit INT, p_window_seconds INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_now TIMESTAMPTZ := clock_timestamp();
  v_window INTERVAL := make_interval(secs => p_window_seconds);
  v_count DOUBLE PRECISION;
  v_since TIMESTAMPTZ;
BEGIN
  SELECT b.tokens, b.at INTO v_count, v_since FROM queen.kv_rate_bucket b
   WHERE b.tenant = p_peer AND b.scope = 'console_login' AND b.at > v_now - v_window;
  IF v_count >= p_limit THEN
    RETURN jsonb_build_object('refused', true, 'retryAfterSeconds', greatest(1, ceil(extract(epoch FROM v_since + v_window - v_now)))::int);
  END IF;
  IF p_failed THEN
    IF v_count IS NULL THEN
      DELETE FROM queen.kv_rate_bucket WHERE ctid IN (
        SELECT ctid FROM queen.kv_rate_bucket WHERE scope = 'console_login' AND at <= v_now - v_window LIMIT 1000 FOR UPDATE SKIP LOCKED);
      IF (SELECT count(*) FROM (SELECT 1 FROM queen.kv_rate_bucket WHERE scope = 'console_login' LIMIT 10000) n) >= 10000 THEN
        DELETE FROM queen.kv_rate_bucket WHERE scope = 'console_login';
      END IF;
    END IF;
    INSERT INTO queen.kv_rate_bucket AS b (tenant, scope, tokens, at) VALUES (p_peer, 'console_login', 1, v_now)
    ON CONFLICT (tenant, scope) DO UPDATE
       SET tokens = CASE WHEN b.at <= v_now - v_window THEN 1 ELSE b.tokens + 1 END,
           at = CASE WHEN b.at <= v_now - v_window THEN v_now ELSE b.at END;
  END IF;
  RETURN jsonb_build_object('refused', false);
END $$;
