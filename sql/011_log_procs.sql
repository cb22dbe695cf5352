-- 011: the log's rules. Every log route and the transaction wire's `operations` call
-- these; the timers sweeper fires a timer through queen.log_push_v1. TypeScript only carries JSON.
--
-- Errors: SQLSTATE QK400 with DETAIL {"code", "index"} (a bad request, the API's 400), and QK412
-- with DETAIL {"failedIndex", "ackReason"} (an ack that failed inside the transaction wire: raising
-- aborts the whole bundle, which is the point).
--
-- Tenancy: every entry point takes the tenant first and reaches queues, partitions, messages,
-- consumer groups and leases only through that tenant's queues (queen.queues.tenant_id), so a
-- partitionId, leaseId or transactionId of another tenant is answered exactly as an unknown one.
-- The API passes the x-queen-tenant UUID under QUEEN_TENANCY_HEADER=1, else the default tenant;
-- the sweeper's fire passes the timer's tenant.
--
-- Locks, inside the partitions/messages space (the last of shared/lockOrder.ts): partition rows
-- (push) before partition_consumers rows (ack), each in ascending order, taken up front by
-- queen.log_apply_v1 and queen.log_ack_batch_v1 so two bundles can never wait on each other in a
-- circle. Pop takes one partition_consumers row with SKIP LOCKED and waits on nothing.

-- The signatures from before tenancy, whose bodies found a queue by name alone. The entry points
-- the API calls stay, as wrappers for the default tenant (at the end of this file), so an API of the
-- previous release running beside this one keeps working until it is replaced; the rest go.
DROP FUNCTION IF EXISTS queen.log_ensure_partition_v1(TEXT, TEXT);
DROP FUNCTION IF EXISTS queen.log_push_v1(TEXT, TEXT, JSONB, TEXT);
DROP FUNCTION IF EXISTS queen.log_push_items_v1(JSONB, INT);
DROP FUNCTION IF EXISTS queen.log_lock_partitions_v1(JSONB);
DROP FUNCTION IF EXISTS queen.log_lock_consumers_v1(JSONB[]);
DROP FUNCTION IF EXISTS queen.log_ack_one_v1(JSONB, INT, BOOLEAN);
DROP FUNCTION IF EXISTS queen.log_push_fast_many_v1(TEXT, TEXT, JSONB[], TEXT[]);
DROP FUNCTION IF EXISTS queen.log_push_fast_v1(TEXT, TEXT, JSONB, TEXT);
DROP FUNCTION IF EXISTS queen.log_push_one_fast_v1(JSONB);

-- Queue, partition and consumer-group names: queen.name_ok_v1, and never NULL.
CREATE OR REPLACE FUNCTION queen.log_name_ok_v1(p_name TEXT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_name IS NOT NULL AND queen.name_ok_v1(p_name)
$$;

CREATE OR REPLACE FUNCTION queen.log_uuid_ok_v1(p_text TEXT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_text IS NOT NULL AND p_text ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
$$;

-- A jsonb field as text only when it is a JSON string (a number or object is not a name).
CREATE OR REPLACE FUNCTION queen.log_str_v1(p_value JSONB) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN jsonb_typeof(p_value) = 'string' THEN p_value #>> '{}' END
$$;

CREATE OR REPLACE FUNCTION queen.log_ts_v1(TIMESTAMPTZ) RETURNS TEXT
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT to_char($1 AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- A message's id on the wire (Queen's `message_id` in a push answer, `id` in a pop): a UUID derived
-- from where the message is, (partition, seq), so it needs no column and a duplicate push reports
-- the stored winner's id.
CREATE OR REPLACE FUNCTION queen.log_message_id_v1(p_partition UUID, p_seq BIGINT) RETURNS UUID
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT md5(p_partition::text || '/' || p_seq::text)::uuid
$$;

-- Validates one push. `p_index` is the position the 400 names (the item's, or in the transaction
-- wire the operation's).
CREATE OR REPLACE FUNCTION queen.log_check_push_v1(
  p_queue TEXT, p_partition TEXT, p_transaction_id TEXT, p_index INT
) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
  IF p_queue IS NULL THEN
    PERFORM queen.fail_v1('log_queue_required', format('Item %s: queue is required (a string).', p_index), p_index);
  END IF;
  IF NOT queen.log_name_ok_v1(p_queue) THEN
    PERFORM queen.fail_v1('log_invalid_queue', format(
      'Item %s: a queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', p_index), p_index);
  END IF;
  IF p_partition IS NOT NULL AND NOT queen.log_name_ok_v1(p_partition) THEN
    PERFORM queen.fail_v1('log_invalid_partition', format(
      'Item %s: a partition name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', p_index), p_index);
  END IF;
  IF p_transaction_id IS NOT NULL AND (length(p_transaction_id) = 0 OR octet_length(p_transaction_id) > 256) THEN
    PERFORM queen.fail_v1('log_invalid_transaction_id', format(
      'Item %s: transactionId is a non-empty string of at most 256 bytes.', p_index), p_index);
  END IF;
END $$;

-- What only a client push is refused: a transactionId starting with `timer:`. Those are the
-- sweeper's: a timer fires as 'timer:' || timer_id (queen.timers_fire_v1), and a client push that
-- took one first made the fire a silent duplicate, the timer's payload never delivered. Checked
-- by the client's entry points (log_push_items_v1, log_apply_v1; the fast path declines such an
-- id), never by log_push_v1, which the fire calls.
CREATE OR REPLACE FUNCTION queen.log_check_client_transaction_id_v1(p_transaction_id TEXT, p_index INT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  IF starts_with(p_transaction_id, 'timer:') THEN
    PERFORM queen.fail_v1('log_reserved_transaction_id', format(
      'Item %s: transactionIds starting with timer: are reserved for the messages timers deliver; choose another.', p_index), p_index);
  END IF;
END $$;

-- The queue and partition, created on first use. ON CONFLICT DO NOTHING writes nothing for an
-- existing row, so the common case is two index probes and no lock.
CREATE OR REPLACE FUNCTION queen.log_ensure_partition_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, OUT q_id UUID, OUT p_id UUID)
LANGUAGE plpgsql AS $$
BEGIN
  SELECT q.id INTO q_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  IF q_id IS NULL THEN
    INSERT INTO queen.queues AS q (tenant_id, name) VALUES (p_tenant, p_queue) ON CONFLICT (tenant_id, name) DO NOTHING;
    SELECT q.id INTO q_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  END IF;
  SELECT p.id INTO p_id FROM queen.partitions p WHERE p.queue_id = q_id AND p.name = p_partition;
  IF p_id IS NULL THEN
    INSERT INTO queen.partitions AS p (queue_id, name) VALUES (q_id, p_partition) ON CONFLICT (queue_id, name) DO NOTHING;
    SELECT p.id INTO p_id FROM queen.partitions p WHERE p.queue_id = q_id AND p.name = p_partition;
  END IF;
END $$;

-- THE push. Public interface (the timers sweeper fires a timer through it, with the timer's tenant
-- and a transactionId derived from the timer id): creates the tenant's queue and partition on first use; a transactionId already in
-- the partition stores nothing and answers "duplicate". A NULL partition is "Default"; a NULL
-- transactionId gets a fresh UUID.
-- Answer: {"transactionId", "partitionId", "queue", "partition", "status": "queued" | "duplicate"}.
CREATE OR REPLACE FUNCTION queen.log_push_v1(
  p_tenant UUID, p_queue TEXT, p_partition TEXT, p_payload JSONB, p_transaction_id TEXT
) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_partition TEXT := coalesce(p_partition, 'Default');
  v_txid TEXT := coalesce(p_transaction_id, gen_random_uuid()::text);
  v_ids RECORD;
  v_last BIGINT;
  v_seq BIGINT;
  v_status TEXT := 'queued';
BEGIN
  PERFORM queen.log_check_push_v1(p_queue, v_partition, v_txid, NULL);
  v_ids := queen.log_ensure_partition_v1(p_tenant, p_queue, v_partition);
  -- The partition row's lock serializes pushes to this partition until commit: seq order is
  -- commit order, and the duplicate check below cannot race another push of the same id.
  SELECT p.last_seq INTO v_last FROM queen.partitions p WHERE p.id = v_ids.p_id FOR NO KEY UPDATE;
  SELECT m.seq INTO v_seq FROM queen.messages m WHERE m.partition_id = v_ids.p_id AND m.transaction_id = v_txid;
  IF v_seq IS NOT NULL THEN
    v_status := 'duplicate';
  ELSE
    v_seq := v_last + 1;
    UPDATE queen.partitions SET last_seq = v_seq WHERE id = v_ids.p_id;
    INSERT INTO queen.messages (partition_id, seq, transaction_id, payload)
    VALUES (v_ids.p_id, v_seq, v_txid, p_payload);
    -- Wakes long-polling pops on commit; identical payloads in one transaction fold into one.
    -- '<tenant>/<queue>': a pop waits on its own tenant's queue (services/api/pushSignal.ts).
    PERFORM pg_notify('queen_log', p_tenant::text || '/' || p_queue);
  END IF;
  -- Queen's push answer entry (snake_case but queueName, as Queen spells it); a duplicate's
  -- message_id is the stored winner's. `index` is set by the caller that knows the item's place.
  RETURN jsonb_build_object('index', 0, 'transaction_id', v_txid, 'status', v_status,
                            'message_id', queen.log_message_id_v1(v_ids.p_id, v_seq), 'partition_id', v_ids.p_id,
                            'trace_id', NULL, 'queueName', p_queue, 'partition', v_partition);
END $$;

-- POST /api/v1/push's items (and a transaction-wire push operation's items): validated first, all
-- of them; the partitions locked in ascending (queue, partition) order; then pushed in request
-- order. Answers one element per item, in request order. `p_index` (the wire's operation index)
-- names the 400 when given; otherwise the item's index does.
CREATE OR REPLACE FUNCTION queen.log_push_items_v1(p_tenant UUID, p_items JSONB, p_index INT DEFAULT NULL) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_n INT;
  v_item JSONB;
  v_out JSONB[] := '{}';
  v_queue TEXT;
  v_partition TEXT;
  v_payloads JSONB[];
  v_txids TEXT[];
  v_run JSONB[];
  i INT;
  j INT;
  k INT;
BEGIN
  IF p_items IS NULL OR jsonb_typeof(p_items) <> 'array' OR jsonb_array_length(p_items) = 0 THEN
    PERFORM queen.fail_v1('log_items_required', 'items must be a non-empty array of {queue, partition?, payload, transactionId?}.', p_index);
  END IF;
  v_n := jsonb_array_length(p_items);
  FOR i IN 0 .. v_n - 1 LOOP
    v_item := p_items->i;
    IF jsonb_typeof(v_item) <> 'object' THEN
      PERFORM queen.fail_v1('log_invalid_item', format('Item %s is not an object.', i), coalesce(p_index, i));
    END IF;
    IF v_item ? 'partition' AND jsonb_typeof(v_item->'partition') NOT IN ('string', 'null') THEN
      PERFORM queen.fail_v1('log_invalid_partition', format('Item %s: partition is a string.', i), coalesce(p_index, i));
    END IF;
    IF v_item ? 'transactionId' AND jsonb_typeof(v_item->'transactionId') NOT IN ('string', 'null') THEN
      PERFORM queen.fail_v1('log_invalid_transaction_id', format('Item %s: transactionId is a string.', i), coalesce(p_index, i));
    END IF;
    PERFORM queen.log_check_push_v1(queen.log_str_v1(v_item->'queue'),
      coalesce(queen.log_str_v1(v_item->'partition'), 'Default'), queen.log_str_v1(v_item->'transactionId'), coalesce(p_index, i));
    PERFORM queen.log_check_client_transaction_id_v1(queen.log_str_v1(v_item->'transactionId'), coalesce(p_index, i));
  END LOOP;
  PERFORM queen.log_lock_partitions_v1(p_tenant, p_items);
  -- Each item validated above and its partition created and locked: the fast path takes each run
  -- of consecutive items to one partition in one call (its expressions set up once, last_seq and
  -- the NOTIFY once a run), unless queen.log_fast_path = off, and then log_push_v1 does, as it
  -- always did. (Validated items are all the fast path's: it answers a whole run or none of it.)
  i := 0;
  WHILE i < v_n LOOP
    v_queue := p_items->i->>'queue';
    v_partition := coalesce(p_items->i->>'partition', 'Default');
    v_payloads := '{}';
    v_txids := '{}';
    j := i;
    WHILE j < v_n AND p_items->j->>'queue' = v_queue AND coalesce(p_items->j->>'partition', 'Default') = v_partition LOOP
      v_payloads := v_payloads || (p_items->j->'payload');
      v_txids := v_txids || coalesce(p_items->j->>'transactionId', '');
      j := j + 1;
    END LOOP;
    v_run := queen.log_push_fast_many_v1(p_tenant, v_queue, v_partition, v_payloads, v_txids);
    FOR k IN i .. j - 1 LOOP
      v_item := p_items->k;
      v_out := v_out || (coalesce(v_run[k - i + 1],
        queen.log_push_v1(p_tenant, v_item->>'queue', v_item->>'partition', v_item->'payload', v_item->>'transactionId'))
        || jsonb_build_object('index', k));
    END LOOP;
    i := j;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;

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
  IF v_options ? 'leaseTime' THEN
    IF jsonb_typeof(v_options->'leaseTime') <> 'number' OR (v_options->>'leaseTime')::numeric NOT BETWEEN 1 AND 86400
       OR (v_options->>'leaseTime')::numeric <> trunc((v_options->>'leaseTime')::numeric) THEN
      PERFORM queen.fail_v1('log_invalid_lease_time', 'options.leaseTime is a whole number of seconds from 1 to 86400.', NULL);
    END IF;
    -- Through numeric: 30.0 is the whole number 30 (checked above), and '30.0'::int would raise.
    v_lease := (v_options->>'leaseTime')::numeric::int;
  END IF;
  IF v_options ? 'retryLimit' THEN
    IF jsonb_typeof(v_options->'retryLimit') <> 'number' OR (v_options->>'retryLimit')::numeric NOT BETWEEN 0 AND 1000
       OR (v_options->>'retryLimit')::numeric <> trunc((v_options->>'retryLimit')::numeric) THEN
      PERFORM queen.fail_v1('log_invalid_retry_limit', 'options.retryLimit is a whole number from 0 to 1000.', NULL);
    END IF;
    v_retry := (v_options->>'retryLimit')::numeric::int;
  END IF;
  FOREACH v_key IN ARRAY ARRAY['delayedProcessing', 'windowBuffer'] LOOP
    CONTINUE WHEN NOT v_options ? v_key;
    IF jsonb_typeof(v_options->v_key) <> 'number' OR (v_options->>v_key)::numeric NOT BETWEEN 0 AND 86400
       OR (v_options->>v_key)::numeric <> trunc((v_options->>v_key)::numeric) THEN
      PERFORM queen.fail_v1('log_invalid_options', format('options.%s is a whole number of seconds from 0 to 86400.', v_key), NULL);
    END IF;
  END LOOP;
  v_delay := (v_options->>'delayedProcessing')::numeric::int;
  v_window := (v_options->>'windowBuffer')::numeric::int;
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

-- A lease that expired with messages still unsettled: settles it for the group, under the
-- partition_consumers row lock its caller holds. Why: a consumer that dies before it acks (a poison
-- message that crashes every consumer) never sends `failed`, so without this the message would come
-- back forever and block its partition for the group. Like SQS's maxReceiveCount, each message the
-- lease held and had not settled counts one failed delivery, exactly as a `failed` ack does (same
-- message_failures row, same counters); one past the queue's retry_limit is dead-lettered for this
-- group (same marker) and finished, so the cursor moves past it. Messages acked `failed` under this
-- lease (lease_failed) were counted by that ack and are not counted again; completed ones are behind
-- the cursor or in done_seqs. The lease is cleared in the transaction that writes the counts, under
-- the same row lock, so a lease is counted once: the next caller finds no lease (pop's SKIP LOCKED
-- re-checks the row it locks against the committed version), and a rollback undoes both.
CREATE OR REPLACE FUNCTION queen.log_lapse_lease_v1(
  p_partition UUID, p_group TEXT, p_retry_limit INT, p_now TIMESTAMPTZ
) RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
  v_pc queen.partition_consumers;
  v_counted INT;
  v_dead BIGINT[];
BEGIN
  SELECT * INTO v_pc FROM queen.partition_consumers c
   WHERE c.partition_id = p_partition AND c.consumer_group = p_group;
  IF v_pc.lease_id IS NULL OR v_pc.lease_expires_at > p_now THEN RETURN; END IF;

  WITH lapsed AS (
    SELECT s.seq FROM unnest(v_pc.lease_seqs) s (seq)
     WHERE s.seq > v_pc.cursor_seq AND s.seq <> ALL (v_pc.done_seqs) AND s.seq <> ALL (v_pc.lease_failed)
       AND EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = p_partition AND m.seq = s.seq)
  ), counted AS (
    INSERT INTO queen.message_failures AS f (partition_id, consumer_group, seq, failures, last_failed_at, dead_lettered_at)
    SELECT p_partition, p_group, l.seq, 1, p_now, CASE WHEN 1 > p_retry_limit THEN p_now END FROM lapsed l
    ON CONFLICT (partition_id, consumer_group, seq) DO UPDATE
       SET failures = f.failures + 1, last_failed_at = p_now,
           dead_lettered_at = CASE WHEN f.failures + 1 > p_retry_limit THEN p_now ELSE f.dead_lettered_at END
    RETURNING f.seq, f.dead_lettered_at IS NOT NULL AS dead
  )
  SELECT count(*)::int, coalesce(array_agg(k.seq ORDER BY k.seq) FILTER (WHERE k.dead), '{}')
    INTO v_counted, v_dead FROM counted k;

  -- Dead letters are finished: fold them into the cursor as a `failed` ack past the limit does.
  v_pc.done_seqs := v_pc.done_seqs || v_dead;
  WHILE v_pc.cursor_seq + 1 = ANY (v_pc.done_seqs) LOOP
    v_pc.cursor_seq := v_pc.cursor_seq + 1;
    v_pc.done_seqs := array_remove(v_pc.done_seqs, v_pc.cursor_seq);
  END LOOP;

  UPDATE queen.partition_consumers
     SET cursor_seq = v_pc.cursor_seq, done_seqs = v_pc.done_seqs, lease_id = NULL, lease_expires_at = NULL,
         lease_seqs = '{}', lease_failed = '{}', failures = failures + v_counted,
         dead_letters = dead_letters + cardinality(v_dead), updated_at = p_now
   WHERE partition_id = p_partition AND consumer_group = p_group;
END $$;

-- GET /api/v1/pop: leases the next `p_batch` messages of one partition to one consumer of the
-- group. Which partition: one with messages past the group's cursor and no live lease, the least
-- recently leased first (so consumers rotate over partitions), taken with SKIP LOCKED (a
-- partition another consumer is popping or acking right now is simply not a candidate).
-- Answers a JSON array of messages; empty when nothing is available.
--
-- A lease covers the messages it handed out. It ends when every leased message is settled by an
-- ack, or when it expires: the pop that then takes the partition over first settles the lapsed lease
-- (queen.log_lapse_lease_v1: each message it held unacked counts one failed delivery, and one past
-- the queue's retry_limit is dead-lettered), then leases what is left. A group seen for the first
-- time starts at the beginning of the partition: consumer groups each see every message.
CREATE OR REPLACE FUNCTION queen.log_pop_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_group TEXT := coalesce(p_group, '__QUEUE_MODE__');
  v_queue queen.queues;
  v_partition_id UUID;
  v_pc queen.partition_consumers;
  v_seqs BIGINT[];
  v_lease UUID;
  v_now TIMESTAMPTZ;
  v_expires TIMESTAMPTZ;
  v_lapsed BOOLEAN;
  v_found RECORD;
  v_delay INT := 0;
  v_window INT := 0;
  v_due_by TIMESTAMPTZ := 'infinity';
  v_quiet_by TIMESTAMPTZ := 'infinity';
BEGIN
  IF NOT queen.log_name_ok_v1(p_queue) THEN
    PERFORM queen.fail_v1('log_invalid_queue', 'A queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF p_partition IS NOT NULL AND NOT queen.log_name_ok_v1(p_partition) THEN
    PERFORM queen.fail_v1('log_invalid_partition', 'A partition name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF NOT queen.log_name_ok_v1(v_group) THEN
    PERFORM queen.fail_v1('log_invalid_consumer_group', 'A consumer group is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF p_batch IS NULL OR p_batch < 1 OR p_batch > 1000 THEN
    PERFORM queen.fail_v1('log_invalid_batch', 'batch is a whole number from 1 to 1000.', NULL);
  END IF;

  -- The queue and its delays (queen.queue_delays, below), in one statement.
  SELECT q AS queue, coalesce(d.delayed_processing, 0) AS delay, coalesce(d.window_buffer, 0) AS window_buffer INTO v_found
    FROM queen.queues q LEFT JOIN queen.queue_delays d ON d.queue_id = q.id
   WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  IF NOT FOUND THEN RETURN '[]'::jsonb; END IF;
  v_queue := v_found.queue;
  v_delay := v_found.delay;
  v_window := v_found.window_buffer;
  IF p_partition IS NOT NULL THEN
    SELECT id INTO v_partition_id FROM queen.partitions WHERE queue_id = v_queue.id AND name = p_partition;
    IF v_partition_id IS NULL THEN RETURN '[]'::jsonb; END IF;
  END IF;

  -- The group's row per partition, created on first sight.
  INSERT INTO queen.partition_consumers (partition_id, consumer_group)
  SELECT p.id, v_group FROM queen.partitions p
   WHERE p.queue_id = v_queue.id AND (v_partition_id IS NULL OR p.id = v_partition_id)
     AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c WHERE c.partition_id = p.id AND c.consumer_group = v_group)
  ON CONFLICT DO NOTHING;

  v_now := clock_timestamp();
  -- delayedProcessing: a message is delivered once it is that old (v_due_by: created at or before).
  -- windowBuffer: a partition is leased once its newest message is that old. The messages of a
  -- partition go in seq order, so a message not yet due holds back the ones behind it, and a
  -- partition is a candidate only when its next message (cursor_seq + 1: every earlier one is
  -- finished, and a message is never deleted but with its queue) is due.
  IF v_delay > 0 THEN v_due_by := v_now - make_interval(secs => v_delay); END IF;
  IF v_window > 0 THEN v_quiet_by := v_now - make_interval(secs => v_window); END IF;
  LOOP
    -- Two statements rather than one with both conditions: a queue without delays (the common pop)
    -- keeps the plan it had before they existed.
    IF v_delay = 0 AND v_window = 0 THEN
      SELECT c.* INTO v_pc
        FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
       WHERE p.queue_id = v_queue.id AND (v_partition_id IS NULL OR p.id = v_partition_id)
         AND c.consumer_group = v_group
         AND (c.lease_id IS NULL OR c.lease_expires_at <= v_now)
         AND p.last_seq > c.cursor_seq
       ORDER BY c.last_leased_at NULLS FIRST, p.name
       LIMIT 1
       FOR UPDATE OF c SKIP LOCKED;
    ELSE
      SELECT c.* INTO v_pc
        FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
       WHERE p.queue_id = v_queue.id AND (v_partition_id IS NULL OR p.id = v_partition_id)
         AND c.consumer_group = v_group
         AND (c.lease_id IS NULL OR c.lease_expires_at <= v_now)
         AND p.last_seq > c.cursor_seq
         AND (v_due_by = 'infinity' OR EXISTS (SELECT 1 FROM queen.messages m
               WHERE m.partition_id = c.partition_id AND m.seq = c.cursor_seq + 1 AND m.created_at <= v_due_by))
         AND (v_quiet_by = 'infinity' OR EXISTS (SELECT 1 FROM queen.messages m
               WHERE m.partition_id = p.id AND m.seq = p.last_seq AND m.created_at <= v_quiet_by))
       ORDER BY c.last_leased_at NULLS FIRST, p.name
       LIMIT 1
       FOR UPDATE OF c SKIP LOCKED;
    END IF;
    IF v_pc.partition_id IS NULL THEN RETURN '[]'::jsonb; END IF;

    -- A lapsed lease is settled here, under the row lock this pop holds, before anything is
    -- handed out again: this is where its expiry is noticed, and clearing it in the same
    -- transaction is what makes it count once.
    v_lapsed := v_pc.lease_id IS NOT NULL;
    IF v_lapsed THEN
      PERFORM queen.log_lapse_lease_v1(v_pc.partition_id, v_group, v_queue.retry_limit, v_now);
      SELECT c.* INTO v_pc FROM queen.partition_consumers c
       WHERE c.partition_id = v_pc.partition_id AND c.consumer_group = v_group;
    END IF;

    -- Past the cursor, minus what was finished ahead of it; with a delay, up to the first message
    -- not yet due.
    IF v_due_by = 'infinity' THEN
      SELECT array_agg(s.seq ORDER BY s.seq) INTO v_seqs FROM (
        SELECT m.seq FROM queen.messages m
         WHERE m.partition_id = v_pc.partition_id AND m.seq > v_pc.cursor_seq AND m.seq <> ALL (v_pc.done_seqs)
         ORDER BY m.seq LIMIT p_batch
      ) s;
    ELSE
      SELECT array_agg(s.seq ORDER BY s.seq) INTO v_seqs FROM (
        SELECT n.seq, bool_and(n.created_at <= v_due_by) OVER (ORDER BY n.seq) AS due FROM (
          SELECT m.seq, m.created_at FROM queen.messages m
           WHERE m.partition_id = v_pc.partition_id AND m.seq > v_pc.cursor_seq AND m.seq <> ALL (v_pc.done_seqs)
           ORDER BY m.seq LIMIT p_batch
        ) n
      ) s WHERE s.due;
    END IF;
    EXIT WHEN v_seqs IS NOT NULL;
    -- The lapse dead-lettered the partition's last messages: another partition may have some. The
    -- row just settled has no lease now, so the loop ends (at most one more turn per lapsed lease).
    IF NOT v_lapsed THEN RETURN '[]'::jsonb; END IF;
  END LOOP;

  v_lease := gen_random_uuid();
  v_expires := v_now + make_interval(secs => v_queue.lease_time);
  UPDATE queen.partition_consumers
     SET lease_id = v_lease, lease_expires_at = v_expires, lease_seqs = v_seqs, lease_failed = '{}',
         last_leased_at = v_now, deliveries = deliveries + cardinality(v_seqs), updated_at = v_now
   WHERE partition_id = v_pc.partition_id AND consumer_group = v_group;

  RETURN (
    -- Queen's message (id, transactionId, traceId, data, producerSub, createdAt, partitionId,
    -- partition, leaseId, consumerGroup) and the cell's additions (queue, leaseExpiresAt, retryCount).
    SELECT jsonb_agg(jsonb_build_object(
             'id', queen.log_message_id_v1(m.partition_id, m.seq), 'transactionId', m.transaction_id, 'traceId', NULL,
             'data', m.payload, 'producerSub', NULL, 'partitionId', m.partition_id, 'queue', v_queue.name,
             'partition', p.name, 'leaseId', v_lease, 'leaseExpiresAt', queen.log_ts_v1(v_expires),
             'consumerGroup', v_group, 'createdAt', queen.log_ts_v1(m.created_at),
             'retryCount', coalesce(f.failures, 0)) ORDER BY m.seq)
      FROM queen.messages m
      JOIN queen.partitions p ON p.id = m.partition_id
      LEFT JOIN queen.message_failures f ON f.partition_id = m.partition_id AND f.consumer_group = v_group AND f.seq = m.seq
     WHERE m.partition_id = v_pc.partition_id AND m.seq = ANY (v_seqs));
END $$;

-- GET /api/v1/pop with Queen's `partitions` (p_partitions, 1 to 1000): leases up to that many
-- partitions to one consumer of the group, `p_batch` messages in all, each partition as
-- queen.log_pop_v1 leases one (a partition it has just leased holds a live lease, so the next turn
-- takes another). With more than one partition, every message carries one shared lease id
-- (queen.shared_leases) that acks and lease extends accept for each partition's own lease. A named
-- partition is one partition whatever p_partitions says.
CREATE OR REPLACE FUNCTION queen.log_pop_many_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT, p_partitions INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_group TEXT := coalesce(p_group, '__QUEUE_MODE__');
  v_out JSONB;
  v_got JSONB;
  v_left INT := p_batch;
  v_shared UUID;
BEGIN
  IF p_partitions IS NULL OR p_partitions < 1 OR p_partitions > 1000 THEN
    PERFORM queen.fail_v1('log_invalid_partitions', 'partitions is a whole number from 1 to 1000.', NULL);
  END IF;
  v_out := queen.log_pop_v1(p_tenant, p_queue, p_partition, p_group, p_batch);
  IF p_partitions = 1 OR p_partition IS NOT NULL OR jsonb_array_length(v_out) = 0 THEN RETURN v_out; END IF;
  -- At most min(p_partitions, p_batch) turns: each that goes on leased at least one message.
  v_left := p_batch - jsonb_array_length(v_out);
  FOR v_turn IN 2..p_partitions LOOP
    EXIT WHEN v_left <= 0;
    v_got := queen.log_pop_v1(p_tenant, p_queue, NULL, p_group, v_left);
    EXIT WHEN jsonb_array_length(v_got) = 0;
    v_out := v_out || v_got;
    v_left := v_left - jsonb_array_length(v_got);
  END LOOP;
  IF (SELECT count(DISTINCT e->>'leaseId') FROM jsonb_array_elements(v_out) e) = 1 THEN RETURN v_out; END IF;
  v_shared := gen_random_uuid();
  INSERT INTO queen.shared_leases AS s (partition_id, consumer_group, shared_id, lease_id)
  SELECT DISTINCT (e->>'partitionId')::uuid, v_group, v_shared, (e->>'leaseId')::uuid FROM jsonb_array_elements(v_out) e
  ON CONFLICT (partition_id, consumer_group) DO UPDATE SET shared_id = EXCLUDED.shared_id, lease_id = EXCLUDED.lease_id;
  RETURN (SELECT jsonb_agg(e || jsonb_build_object('leaseId', v_shared) ORDER BY k)
            FROM jsonb_array_elements(v_out) WITH ORDINALITY AS t (e, k));
END $$;

-- Validates one ack (an element of /ack/batch, the body of /ack, or a wire operation) and returns
-- it normalized: {transactionId, partitionId, status, consumerGroup, leaseId}.
CREATE OR REPLACE FUNCTION queen.log_check_ack_v1(p_ack JSONB, p_index INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_txid TEXT := queen.log_str_v1(p_ack->'transactionId');
  v_pid TEXT := queen.log_str_v1(p_ack->'partitionId');
  v_status TEXT := queen.log_str_v1(p_ack->'status');
  v_group TEXT := coalesce(queen.log_str_v1(p_ack->'consumerGroup'), '__QUEUE_MODE__');
  v_lease TEXT := queen.log_str_v1(p_ack->'leaseId');
  v_at TEXT := CASE WHEN p_index IS NULL THEN '' ELSE format('Ack %s: ', p_index) END;
BEGIN
  IF jsonb_typeof(p_ack) IS DISTINCT FROM 'object' THEN
    PERFORM queen.fail_v1('log_invalid_ack', v_at || 'an ack is an object {transactionId, partitionId, status, consumerGroup?, leaseId?}.', p_index);
  END IF;
  IF v_txid IS NULL OR length(v_txid) = 0 THEN
    PERFORM queen.fail_v1('log_transaction_id_required', v_at || 'transactionId is required (a non-empty string).', p_index);
  END IF;
  IF NOT queen.log_uuid_ok_v1(v_pid) THEN
    PERFORM queen.fail_v1('log_invalid_partition_id', v_at || 'partitionId is required: the UUID the pop answered.', p_index);
  END IF;
  IF v_status IS NULL OR v_status NOT IN ('completed', 'failed') THEN
    PERFORM queen.fail_v1('log_invalid_status', v_at || 'status is "completed" or "failed".', p_index);
  END IF;
  IF p_ack ? 'consumerGroup' AND p_ack->'consumerGroup' <> 'null'::jsonb AND NOT queen.log_name_ok_v1(queen.log_str_v1(p_ack->'consumerGroup')) THEN
    PERFORM queen.fail_v1('log_invalid_consumer_group', v_at || 'consumerGroup is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', p_index);
  END IF;
  IF p_ack ? 'leaseId' AND p_ack->'leaseId' <> 'null'::jsonb AND NOT queen.log_uuid_ok_v1(v_lease) THEN
    PERFORM queen.fail_v1('log_invalid_lease_id', v_at || 'leaseId is the UUID the pop answered.', p_index);
  END IF;
  IF p_ack ? 'error' AND jsonb_typeof(p_ack->'error') NOT IN ('string', 'null') THEN
    PERFORM queen.fail_v1('log_invalid_ack', v_at || 'error is a string (why the message failed) or null.', p_index);
  END IF;
  RETURN jsonb_build_object('transactionId', v_txid, 'partitionId', lower(v_pid), 'status', v_status,
                            'consumerGroup', v_group, 'leaseId', lower(v_lease), 'error', queen.log_str_v1(p_ack->'error'));
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

-- One ack, already validated (log_check_ack_v1). The cases, in the order they are decided:
--   not_found      no message with this transactionId in this partition of the tenant's;
--   already_acked  the group is past it (completed or dead-lettered), or it was acked `failed`
--                  under the current lease and awaits redelivery;
--   lease_expired  the lease that held it is gone: expired (even if no one re-popped yet), or
--                  superseded by another consumer's lease when the ack names its leaseId (a
--                  zombie); an ack that names a leaseId is fenced by it;
--   not_leased     it is past the cursor but no live lease of this group holds it (never popped,
--                  or popped into a lease that has since been released by its other acks).
-- Without a leaseId, an ack is accepted from whoever holds the live lease that covers the message:
-- pass the leaseId to be fenced against your own expired lease.
--
-- `completed` moves the cursor past the message (or records it ahead of the cursor until the gap
-- closes). `failed` counts a failure; past the queue's retry_limit the message is dead-lettered for
-- this group (finished: the cursor moves past it), else it is redelivered once this lease ends.
-- The lease is released as soon as every message it holds is settled. A lease that expires first
-- counts too: each message it held and had not settled takes one failure, with the same dead
-- letter past retry_limit, when the next pop takes the partition over (queen.log_lapse_lease_v1);
-- an ack never does that counting, it only answers lease_expired.
--
-- On failure: p_raise raises QK412 with DETAIL {failedIndex: p_index, ackReason} (the transaction
-- wire: nothing in the bundle commits); otherwise answers {ok: false, reason: "ack_failed", ackReason}.
CREATE OR REPLACE FUNCTION queen.log_ack_one_v1(p_tenant UUID, a JSONB, p_index INT, p_raise BOOLEAN) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_pid UUID := (a->>'partitionId')::uuid;
  v_group TEXT := a->>'consumerGroup';
  v_lease UUID := (a->>'leaseId')::uuid;
  v_seq BIGINT;
  v_pc queen.partition_consumers;
  v_retry_limit INT;
  v_failures INT;
  v_reason TEXT;
  v_now TIMESTAMPTZ := clock_timestamp();
  v_dead BOOLEAN := false;
  v_finished BOOLEAN := false;
BEGIN
  -- Only through the tenant's own queues: everything below touches v_pid only once this found it.
  SELECT m.seq INTO v_seq FROM queen.messages m
    JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE m.partition_id = v_pid AND m.transaction_id = a->>'transactionId' AND q.tenant_id = p_tenant;
  IF v_seq IS NULL THEN
    v_reason := 'not_found';
  ELSE
    SELECT * INTO v_pc FROM queen.partition_consumers c
     WHERE c.partition_id = v_pid AND c.consumer_group = v_group FOR NO KEY UPDATE;
    IF v_pc.partition_id IS NULL THEN
      v_reason := 'not_leased';
    ELSIF v_seq <= v_pc.cursor_seq OR v_seq = ANY (v_pc.done_seqs) THEN
      v_reason := 'already_acked';
    ELSIF v_pc.lease_id IS NULL OR v_pc.lease_expires_at <= v_now THEN
      v_reason := CASE WHEN v_lease IS NOT NULL OR v_pc.lease_id IS NOT NULL THEN 'lease_expired' ELSE 'not_leased' END;
    ELSIF v_lease IS NOT NULL AND v_lease <> v_pc.lease_id AND NOT EXISTS (SELECT 1 FROM queen.shared_leases s
            WHERE s.partition_id = v_pid AND s.consumer_group = v_group AND s.shared_id = v_lease AND s.lease_id = v_pc.lease_id) THEN
      -- Not this partition's lease, nor the shared id it was handed out under (a pop of several partitions).
      v_reason := 'lease_expired';
    ELSIF v_seq <> ALL (v_pc.lease_seqs) THEN
      v_reason := 'not_leased';
    ELSIF v_seq = ANY (v_pc.lease_failed) THEN
      v_reason := 'already_acked';
    END IF;
  END IF;

  IF v_reason IS NOT NULL THEN
    IF p_raise THEN
      RAISE EXCEPTION USING ERRCODE = 'QK412', MESSAGE = 'ack_failed',
        DETAIL = jsonb_build_object('failedIndex', p_index, 'ackReason', v_reason)::text;
    END IF;
    -- `success` and `error` are what Queen's client reads; `ok` and `ackReason` the cell's.
    RETURN jsonb_build_object('ok', false, 'success', false, 'error', v_reason, 'reason', 'ack_failed', 'ackReason', v_reason,
      'transactionId', a->'transactionId', 'partitionId', a->'partitionId', 'consumerGroup', v_group, 'status', a->'status');
  END IF;

  IF a->>'status' = 'completed' THEN
    v_finished := true;
    v_pc.completed := v_pc.completed + 1;
  ELSE
    SELECT q.retry_limit INTO v_retry_limit FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = v_pid;
    INSERT INTO queen.message_failures AS f (partition_id, consumer_group, seq, failures, last_failed_at)
    VALUES (v_pid, v_group, v_seq, 1, v_now)
    ON CONFLICT (partition_id, consumer_group, seq) DO UPDATE SET failures = f.failures + 1, last_failed_at = v_now
    RETURNING failures INTO v_failures;
    v_pc.failures := v_pc.failures + 1;
    -- The ack's own words for the failure, kept for the dead-letter read (the last one wins).
    IF coalesce(a->>'error', '') <> '' THEN
      INSERT INTO queen.message_failure_texts AS t (partition_id, consumer_group, seq, error_message)
      VALUES (v_pid, v_group, v_seq, left(a->>'error', 1024))
      ON CONFLICT (partition_id, consumer_group, seq) DO UPDATE SET error_message = EXCLUDED.error_message;
    END IF;
    IF v_failures > v_retry_limit THEN
      UPDATE queen.message_failures SET dead_lettered_at = v_now
       WHERE partition_id = v_pid AND consumer_group = v_group AND seq = v_seq;
      v_dead := true;
      v_finished := true;
      v_pc.dead_letters := v_pc.dead_letters + 1;
    ELSE
      v_pc.lease_failed := v_pc.lease_failed || v_seq;
    END IF;
  END IF;

  IF v_finished THEN
    IF v_seq = v_pc.cursor_seq + 1 THEN
      v_pc.cursor_seq := v_seq;
      -- Fold in what was finished ahead of the gap that just closed.
      WHILE v_pc.cursor_seq + 1 = ANY (v_pc.done_seqs) LOOP
        v_pc.cursor_seq := v_pc.cursor_seq + 1;
        v_pc.done_seqs := array_remove(v_pc.done_seqs, v_pc.cursor_seq);
      END LOOP;
    ELSE
      v_pc.done_seqs := v_pc.done_seqs || v_seq;
    END IF;
  END IF;

  -- Every leased message settled: the partition goes back to the group now, not at expiry.
  IF NOT EXISTS (
    SELECT 1 FROM unnest(v_pc.lease_seqs) s
     WHERE s > v_pc.cursor_seq AND s <> ALL (v_pc.done_seqs) AND s <> ALL (v_pc.lease_failed)) THEN
    v_pc.lease_id := NULL;
    v_pc.lease_expires_at := NULL;
    v_pc.lease_seqs := '{}';
    v_pc.lease_failed := '{}';
  END IF;

  UPDATE queen.partition_consumers
     SET cursor_seq = v_pc.cursor_seq, done_seqs = v_pc.done_seqs, lease_id = v_pc.lease_id,
         lease_expires_at = v_pc.lease_expires_at, lease_seqs = v_pc.lease_seqs, lease_failed = v_pc.lease_failed,
         completed = v_pc.completed, failures = v_pc.failures, dead_letters = v_pc.dead_letters, updated_at = v_now
   WHERE partition_id = v_pid AND consumer_group = v_group;

  RETURN jsonb_build_object('ok', true, 'success', true, 'transactionId', a->'transactionId', 'partitionId', v_pid,
    'consumerGroup', v_group, 'status', a->'status', 'deadLetter', v_dead);
END $$;

-- POST /api/v1/ack (one element) and /ack/batch: every ack validated, the rows locked in order, the
-- acks applied in request order. Each ack succeeds or fails on its own (p_raise false); the answer
-- is one element per ack.
CREATE OR REPLACE FUNCTION queen.log_ack_batch_v1(p_tenant UUID, p_acks JSONB, p_raise BOOLEAN DEFAULT false) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_norm JSONB[] := '{}';
  v_out JSONB[] := '{}';
  v_n INT;
  i INT;
BEGIN
  IF p_acks IS NULL OR jsonb_typeof(p_acks) <> 'array' OR jsonb_array_length(p_acks) = 0 THEN
    PERFORM queen.fail_v1('log_acks_required', 'acknowledgments must be a non-empty array of {transactionId, partitionId, status, consumerGroup?, leaseId?}.', NULL);
  END IF;
  v_n := jsonb_array_length(p_acks);
  IF v_n > 1000 THEN
    PERFORM queen.fail_v1('log_batch_too_large', format('The batch has %s acks; at most 1000 are allowed.', v_n), NULL);
  END IF;
  FOR i IN 0 .. v_n - 1 LOOP
    v_norm := v_norm || queen.log_check_ack_v1(p_acks->i, CASE WHEN v_n = 1 THEN NULL ELSE i END);
  END LOOP;
  PERFORM queen.log_lock_consumers_v1(p_tenant, v_norm);
  FOR i IN 1 .. v_n LOOP
    v_out := v_out || queen.log_ack_one_v1(p_tenant, v_norm[i], i - 1, p_raise);
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;

-- POST /api/v1/ack/batch's body: {acknowledgments: [...], consumerGroup?}. A body-level
-- consumerGroup (a string) is the group of every acknowledgment, replacing any the elements name:
-- Queen's client names the group there and only there, so without this its acks went to queue mode
-- (not_leased) and the group's messages came back at lease expiry. Absent or null: each element's
-- own consumerGroup, else queue mode. A non-string value is refused by the element check.
CREATE OR REPLACE FUNCTION queen.log_ack_batch_body_v1(p_tenant UUID, p_body JSONB) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_acks JSONB := p_body->'acknowledgments';
BEGIN
  IF p_body ? 'consumerGroup' AND jsonb_typeof(p_body->'consumerGroup') <> 'null' AND jsonb_typeof(v_acks) = 'array' THEN
    SELECT coalesce(jsonb_agg(CASE WHEN jsonb_typeof(e) = 'object' THEN e || jsonb_build_object('consumerGroup', p_body->'consumerGroup') ELSE e END
                              ORDER BY k), '[]'::jsonb)
      INTO v_acks FROM jsonb_array_elements(v_acks) WITH ORDINALITY AS t(e, k);
  END IF;
  RETURN queen.log_ack_batch_v1(p_tenant, v_acks, false);
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
  IF NOT queen.log_uuid_ok_v1(p_lease) THEN
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
  RETURN jsonb_build_object('ok', true, 'success', true, 'leaseId', lower(p_lease), 'leaseExpiresAt', queen.log_ts_v1(v_expires));
END $$;

-- The push fast path: plainly valid items, in order, to one queue and partition that already exist
-- (given as values: queue and partition as text, the partition already defaulted; each item's
-- payload and transactionId, '' when the item has none). Its callers: a request of one item alone
-- (log_push_request_v1, through log_push_fast_v1), each item of a request log_push_items_v1 has
-- validated, created and locked (the same), and the one-item requests an API worker gathered for
-- one partition (log_push_coalesced_v1). Answers one element per item.
-- Why it pays: a push is a transaction of its own, and plpgsql sets up every expression and
-- nested call it evaluates once per transaction, so the general path's cost
-- is its number of statements and calls (validation twice, ensure-partition twice, the lock twice),
-- not their work. Here: one guard and one lock (partition row, FOR NO KEY UPDATE, held to commit,
-- so seq order is still commit order) for all the items; per item, log_push_v1's duplicate check
-- (after the lock, so it sees every committed push and the items before it) and the message; then
-- last_seq once and the NOTIFY once. For a gathering that is what pays: four pushes in one statement
-- took 0.61-0.77 ms against 0.80-0.91 when each item locked, bumped last_seq and notified on its
-- own, eight 0.68-1.04 against 0.83-1.45 (pgbench, one client, 2026-11-30). (One INSERT ... ON
-- CONFLICT DO NOTHING feeding the UPDATE measured the same as the duplicate check, 2026-11-30; one
-- set-based INSERT for all the items cost 0.2 ms more a call than it saved below eight items.)
-- Answers NULL, having done nothing, when the fast path does not apply (a name the general path
-- might refuse, a queue or partition not created yet, SET queen.log_fast_path = off), and a NULL
-- element, that item skipped, for a transactionId the general path might refuse (empty, over
-- 256 bytes, or the sweeper's `timer:` prefix): the general path then decides, refusals included, so every rule keeps one
-- definition. The names' test is queen.name_ok_v1, the one definition of a name.
-- test/log/fastPath.test.ts holds both paths to the same answers and rows.
CREATE OR REPLACE FUNCTION queen.log_push_fast_many_v1(
  p_tenant UUID, p_queue TEXT, p_partition TEXT, p_payloads JSONB[], p_transaction_ids TEXT[]
) RETURNS JSONB[] LANGUAGE plpgsql AS $$
DECLARE
  v_pid UUID;
  v_last BIGINT;
  v_seq BIGINT;
  v_txid TEXT;
  v_status TEXT;
  v_at BIGINT;
  v_out JSONB[] := '{}';
  i INT;
BEGIN
  IF NOT coalesce(queen.name_ok_v1(p_queue) AND queen.name_ok_v1(p_partition), false)
     OR current_setting('queen.log_fast_path', true) IS NOT DISTINCT FROM 'off' THEN
    RETURN NULL;
  END IF;
  SELECT p.id, p.last_seq INTO v_pid, v_last
    FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
   WHERE q.tenant_id = p_tenant AND q.name = p_queue AND p.name = p_partition
     FOR NO KEY UPDATE OF p;
  IF v_pid IS NULL THEN
    RETURN NULL;
  END IF;
  v_seq := v_last;
  FOR i IN 1 .. cardinality(p_transaction_ids) LOOP
    v_txid := p_transaction_ids[i];
    IF NOT coalesce(octet_length(v_txid) <= 256, false) OR starts_with(v_txid, 'timer:') THEN
      v_out := v_out || NULL::jsonb;
      CONTINUE;
    END IF;
    IF v_txid = '' THEN
      v_txid := gen_random_uuid()::text;
    END IF;
    v_at := (SELECT m.seq FROM queen.messages m WHERE m.partition_id = v_pid AND m.transaction_id = v_txid);
    IF v_at IS NOT NULL THEN
      v_status := 'duplicate';
    ELSE
      v_seq := v_seq + 1;
      v_at := v_seq;
      INSERT INTO queen.messages (partition_id, seq, transaction_id, payload) VALUES (v_pid, v_seq, v_txid, p_payloads[i]);
      v_status := 'queued';
    END IF;
    -- The entry log_push_v1 answers (the same keys, so both paths answer alike).
    v_out := v_out || jsonb_build_object('index', i - 1, 'transaction_id', v_txid, 'status', v_status,
                                         'message_id', queen.log_message_id_v1(v_pid, v_at), 'partition_id', v_pid,
                                         'trace_id', NULL, 'queueName', p_queue, 'partition', p_partition);
  END LOOP;
  IF v_seq > v_last THEN
    UPDATE queen.partitions SET last_seq = v_seq WHERE id = v_pid;
    PERFORM pg_notify('queen_log', p_tenant::text || '/' || p_queue);
  END IF;
  RETURN v_out;
END $$;

-- One item: the fast path above with one element.
CREATE OR REPLACE FUNCTION queen.log_push_fast_v1(
  p_tenant UUID, p_queue TEXT, p_partition TEXT, p_payload JSONB, p_transaction_id TEXT
) RETURNS JSONB LANGUAGE sql AS $$
  SELECT (queen.log_push_fast_many_v1(p_tenant, p_queue, p_partition, ARRAY[p_payload], ARRAY[p_transaction_id]))[1]
$$;

-- How the fast path reads a push request's items (the one-item request alone, and each body of a
-- gathering): the item when the items are one object, else NULL; its queue when a string; its
-- partition when a string, 'Default' when absent or null; its transactionId '' when absent or
-- null, the string when a non-empty string. NULL anywhere else: the fast path declines and the
-- general path decides, refusals included. SQL the planner inlines into its callers, and only
-- functions that cannot fail on any jsonb (with a parameter as a constant the planner may evaluate
-- them while planning, CASE or not).
CREATE OR REPLACE FUNCTION queen.log_fast_item_v1(p_items JSONB) RETURNS JSONB LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(p_items) = 'array' AND p_items->1 IS NULL AND jsonb_typeof(p_items->0) = 'object' THEN p_items->0 END
$$;
CREATE OR REPLACE FUNCTION queen.log_fast_queue_v1(p_item JSONB) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(p_item->'queue') = 'string' THEN p_item->>'queue' END
$$;
CREATE OR REPLACE FUNCTION queen.log_fast_partition_v1(p_item JSONB) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE coalesce(jsonb_typeof(p_item->'partition'), 'null') WHEN 'null' THEN 'Default' WHEN 'string' THEN p_item->>'partition' END
$$;
CREATE OR REPLACE FUNCTION queen.log_fast_transaction_id_v1(p_item JSONB) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE coalesce(jsonb_typeof(p_item->'transactionId'), 'null') WHEN 'null' THEN '' WHEN 'string' THEN nullif(p_item->>'transactionId', '') END
$$;

-- One request's items through the fast path when they are a single item: its answer, or NULL when
-- the shape is anything else or the fast path declined (having done nothing). Inlined into its
-- caller, as are the readers above.
CREATE OR REPLACE FUNCTION queen.log_push_one_fast_v1(p_tenant UUID, p_items JSONB) RETURNS JSONB LANGUAGE sql AS $$
  SELECT CASE WHEN queen.log_fast_item_v1(p_items) IS NOT NULL THEN
    queen.log_push_fast_v1(p_tenant, queen.log_fast_queue_v1(p_items->0), queen.log_fast_partition_v1(p_items->0),
                           p_items->0->'payload', queen.log_fast_transaction_id_v1(p_items->0))
  END
$$;

-- POST /api/v1/push's entry: one item tries the fast path (inlined into the route's statement, a
-- named statement planned once per connection, sparing a plpgsql call); a declined fast path has
-- done nothing and log_push_items_v1 answers as it always did.
CREATE OR REPLACE FUNCTION queen.log_push_request_v1(p_tenant UUID, p_items JSONB) RETURNS JSONB LANGUAGE sql AS $$
  SELECT coalesce(nullif(jsonb_build_array(queen.log_push_one_fast_v1(p_tenant, p_items)), '[null]'::jsonb),
                  queen.log_push_items_v1(p_tenant, p_items))
$$;

-- One tenant's one-item pushes to one partition that an API worker gathered while an earlier push to that
-- partition was in flight (services/api/pushCoalescer.ts says why): the bodies whose one item goes
-- to the first such body's queue and partition, through the fast path in one call, so one lock and
-- one commit serve them all. Answers one row per body, in order: that request's results array, or
-- NULL where the fast path declined it (a shape or transactionId it does not take, another
-- partition, having done nothing for it); the API then sends that request alone, down the general
-- path.
CREATE OR REPLACE FUNCTION queen.log_push_coalesced_v1(p_tenant UUID, p_bodies JSONB) RETURNS SETOF TEXT
LANGUAGE plpgsql AS $$
DECLARE
  v_item JSONB;
  v_q TEXT;
  v_p TEXT;
  v_queue TEXT;
  v_partition TEXT;
  v_taken INT[] := '{}';
  v_payloads JSONB[] := '{}';
  v_txids TEXT[] := '{}';
  v_answers JSONB[];
  v_n INT := jsonb_array_length(p_bodies);
  v_at INT;
  i INT;
BEGIN
  FOR i IN 0 .. v_n - 1 LOOP
    v_item := queen.log_fast_item_v1(p_bodies->i->'items');
    v_q := queen.log_fast_queue_v1(v_item);
    v_p := queen.log_fast_partition_v1(v_item);
    CONTINUE WHEN v_q IS NULL OR v_p IS NULL;
    IF v_queue IS NULL THEN
      v_queue := v_q;
      v_partition := v_p;
    END IF;
    CONTINUE WHEN v_q <> v_queue OR v_p <> v_partition;
    v_taken := v_taken || i;
    v_payloads := v_payloads || (v_item->'payload');
    -- NULL (a transactionId the fast path does not take): that element is declined.
    v_txids := v_txids || queen.log_fast_transaction_id_v1(v_item);
  END LOOP;
  IF v_queue IS NOT NULL THEN
    v_answers := queen.log_push_fast_many_v1(p_tenant, v_queue, v_partition, v_payloads, v_txids);
  END IF;
  FOR i IN 0 .. v_n - 1 LOOP
    v_at := array_position(v_taken, i);
    -- Each request is its own one item: index 0, whatever its place in the gathering.
    RETURN NEXT CASE WHEN v_answers[v_at] IS NOT NULL THEN jsonb_build_array(v_answers[v_at] || '{"index": 0}'::jsonb)::text END;
  END LOOP;
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
           'createdAt', queen.log_ts_v1(d.created_at), 'failedAt', queen.log_ts_v1(d.dead_lettered_at))
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

-- The entry points as the API of the previous release calls them (no tenant): the default tenant's,
-- which is what every row written before tenancy became (010_log.sql). An API of that release
-- running beside this one during a rolling deploy keeps answering; nothing of this release calls them.
CREATE OR REPLACE FUNCTION queen.log_configure_v1(p_body JSONB) RETURNS JSONB LANGUAGE sql AS $$
  SELECT queen.log_configure_v1('00000000-0000-0000-0000-000000000001'::uuid, p_body) $$;
CREATE OR REPLACE FUNCTION queen.log_push_request_v1(p_items JSONB) RETURNS JSONB LANGUAGE sql AS $$
  SELECT queen.log_push_request_v1('00000000-0000-0000-0000-000000000001'::uuid, p_items) $$;
CREATE OR REPLACE FUNCTION queen.log_push_coalesced_v1(p_bodies JSONB) RETURNS SETOF TEXT LANGUAGE sql AS $$
  SELECT queen.log_push_coalesced_v1('00000000-0000-0000-0000-000000000001'::uuid, p_bodies) $$;
CREATE OR REPLACE FUNCTION queen.log_pop_v1(p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT) RETURNS JSONB LANGUAGE sql AS $$
  SELECT queen.log_pop_v1('00000000-0000-0000-0000-000000000001'::uuid, p_queue, p_partition, p_group, p_batch) $$;
CREATE OR REPLACE FUNCTION queen.log_ack_batch_v1(p_acks JSONB, p_raise BOOLEAN DEFAULT false) RETURNS JSONB LANGUAGE sql AS $$
  SELECT queen.log_ack_batch_v1('00000000-0000-0000-0000-000000000001'::uuid, p_acks, p_raise) $$;
CREATE OR REPLACE FUNCTION queen.log_apply_v1(p_ops JSONB) RETURNS JSONB LANGUAGE sql AS $$
  SELECT queen.log_apply_v1('00000000-0000-0000-0000-000000000001'::uuid, p_ops) $$;
CREATE OR REPLACE FUNCTION queen.log_extend_lease_v1(p_lease TEXT, p_seconds INT) RETURNS JSONB LANGUAGE sql AS $$
  SELECT queen.log_extend_lease_v1('00000000-0000-0000-0000-000000000001'::uuid, p_lease, p_seconds) $$;
