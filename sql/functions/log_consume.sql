-- The log read path: pop (of one partition, and of several under one shared lease id), the lapse of
-- a lease, ack.

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

-- The rules of one ack (an element of /ack/batch, the body of /ack, or a wire operation): the first
-- it breaks, as {code, sentence}, or NULL. p_group, when not NULL, is the group a body names for
-- every ack (queen.log_ack_batch_of_v1), judged in place of the ack's own. SQL expressions, so a
-- batch's statement inlines them: a PL/pgSQL call an ack set up its expressions at each batch
-- (about 12 µs an ack). Each test of a string takes its text with ->> after testing its type: the
-- planner inlines a function whose argument it uses twice only when that argument is cheap, and
-- queen.uuid_ok_v1(queen.log_str_v1(...)) ran as a call of its own (about 4 µs).
CREATE OR REPLACE FUNCTION queen.log_ack_problem_v1(p_ack JSONB, p_group JSONB) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN jsonb_typeof(p_ack) IS DISTINCT FROM 'object' THEN
      ARRAY['log_invalid_ack', 'an ack is an object {transactionId, partitionId, status, consumerGroup?, leaseId?}.']
    WHEN coalesce(length(queen.log_str_v1(p_ack->'transactionId')), 0) = 0 THEN
      ARRAY['log_transaction_id_required', 'transactionId is required (a non-empty string).']
    WHEN NOT (jsonb_typeof(p_ack->'partitionId') = 'string' AND queen.uuid_ok_v1(p_ack->>'partitionId')) THEN
      ARRAY['log_invalid_partition_id', 'partitionId is required: the UUID the pop answered.']
    WHEN coalesce(queen.log_str_v1(p_ack->'status') NOT IN ('completed', 'failed'), true) THEN
      ARRAY['log_invalid_status', 'status is "completed" or "failed".']
    WHEN coalesce(p_group, p_ack->'consumerGroup', 'null') <> 'null'
         AND NOT (jsonb_typeof(coalesce(p_group, p_ack->'consumerGroup')) = 'string'
                  AND queen.name_ok_v1(coalesce(p_group, p_ack->'consumerGroup') #>> '{}')) THEN
      ARRAY['log_invalid_consumer_group', 'consumerGroup is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.']
    WHEN coalesce(p_ack->'leaseId', 'null') <> 'null'
         AND NOT (jsonb_typeof(p_ack->'leaseId') = 'string' AND queen.uuid_ok_v1(p_ack->>'leaseId')) THEN
      ARRAY['log_invalid_lease_id', 'leaseId is the UUID the pop answered.']
    WHEN jsonb_typeof(p_ack->'error') NOT IN ('string', 'null') THEN
      ARRAY['log_invalid_ack', 'error is a string (why the message failed) or null.']
  END
$$;

-- An ack that keeps its rules (queen.log_ack_problem_v1, the same p_group), normalized:
-- {transactionId, partitionId, status, consumerGroup, leaseId, error}. STABLE as jsonb_build_object
-- is: a function declared IMMUTABLE around it is never inlined.
CREATE OR REPLACE FUNCTION queen.log_ack_norm_v1(p_ack JSONB, p_group JSONB) RETURNS JSONB
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT jsonb_build_object('transactionId', queen.log_str_v1(p_ack->'transactionId'),
                            'partitionId', lower(queen.log_str_v1(p_ack->'partitionId')),
                            'status', queen.log_str_v1(p_ack->'status'),
                            'consumerGroup', coalesce(queen.log_str_v1(coalesce(p_group, p_ack->'consumerGroup')), '__QUEUE_MODE__'),
                            'leaseId', lower(queen.log_str_v1(p_ack->'leaseId')), 'error', queen.log_str_v1(p_ack->'error'))
$$;

-- The refusal of an ack that broke p_problem (queen.log_ack_problem_v1's answer), naming the ack's
-- index p_index when it is given ("Ack 2: ...").
CREATE OR REPLACE FUNCTION queen.log_ack_refuse_v1(p_problem TEXT[], p_index INT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM queen.fail_v1(p_problem[1], CASE WHEN p_index IS NULL THEN '' ELSE format('Ack %s: ', p_index) END || p_problem[2], p_index);
END $$;

-- Validates one ack and returns it normalized (above); a refusal names p_index when it is given.
CREATE OR REPLACE FUNCTION queen.log_check_ack_v1(p_ack JSONB, p_index INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_problem TEXT[] := queen.log_ack_problem_v1(p_ack, NULL);
BEGIN
  IF v_problem IS NOT NULL THEN PERFORM queen.log_ack_refuse_v1(v_problem, p_index); END IF;
  RETURN queen.log_ack_norm_v1(p_ack, NULL);
END $$;

-- An ack batch's acks (1 to 1000 of them), each validated and normalized (a refusal names the ack's
-- index when there are two or more), in request order, with p_group (a body's consumerGroup, or
-- NULL) as every ack's group: the first step of queen.log_ack_batch_v1 and _v2. One statement
-- judges and normalizes them all; the first ack that breaks a rule is refused.
CREATE OR REPLACE FUNCTION queen.log_check_acks_v1(p_acks JSONB, p_group JSONB) RETURNS JSONB[]
LANGUAGE plpgsql AS $$
DECLARE
  v_norm JSONB[];
  v_n INT;
  v_bad INT;
  v_problem TEXT[];
  v_plan_mode TEXT;
BEGIN
  v_n := queen.array_length_v1(p_acks, 'log_acks_required',
    'acknowledgments must be a non-empty array of {transactionId, partitionId, status, consumerGroup?, leaseId?}.', NULL,
    1000, 'log_batch_too_large', 'The batch has %s acks; at most %s are allowed.');
  -- One ack (a lone POST /ack, a bundle's) is judged by expressions alone: the statement below costs
  -- more to start than it saves on one.
  IF v_n = 1 THEN
    v_problem := queen.log_ack_problem_v1(p_acks->0, p_group);
    IF v_problem IS NOT NULL THEN PERFORM queen.log_ack_refuse_v1(v_problem, NULL); END IF;
    RETURN ARRAY[queen.log_ack_norm_v1(p_acks->0, p_group)];
  END IF;
  v_plan_mode := current_setting('plan_cache_mode');
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  SELECT array_agg(queen.log_ack_norm_v1(t.a, p_group) ORDER BY t.i),
         min(t.i) FILTER (WHERE queen.log_ack_problem_v1(t.a, p_group) IS NOT NULL) - 1
    INTO v_norm, v_bad
    FROM jsonb_array_elements(p_acks) WITH ORDINALITY t(a, i);
  PERFORM set_config('plan_cache_mode', v_plan_mode, true);
  IF v_bad IS NOT NULL THEN
    PERFORM queen.log_ack_refuse_v1(queen.log_ack_problem_v1(p_acks->v_bad, p_group), v_bad);
  END IF;
  RETURN v_norm;
END $$;

-- POST /api/v1/ack (one element) and /ack/batch: every ack validated, the rows locked in order, the
-- acks applied in request order. Each ack succeeds or fails on its own (p_raise false); the answer
-- is one element per ack.
CREATE OR REPLACE FUNCTION queen.log_ack_batch_v1(p_tenant UUID, p_acks JSONB, p_raise BOOLEAN DEFAULT false) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT queen.log_ack_batch_of_v1(false, p_tenant, p_acks, NULL, p_raise)
$$;

-- POST /api/v1/ack/batch's body: {acknowledgments: [...], consumerGroup?}, answered as the
-- acknowledgments it names. A body-level consumerGroup (any value but null) is the group of every
-- acknowledgment, judged and applied in place of any the elements name: Queen's client names the
-- group there and only there, so without this its acks went to queue mode (not_leased) and the
-- group's messages came back at lease expiry. Absent or null: each element's own consumerGroup,
-- else queue mode. A non-string value is refused by the element check, naming the element.
CREATE OR REPLACE FUNCTION queen.log_body_group_v1(p_body JSONB) RETURNS JSONB
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN jsonb_typeof(p_body->'consumerGroup') <> 'null' THEN p_body->'consumerGroup' END
$$;

-- POST /api/v1/ack/batch's body through queen.log_ack_batch_v1 (0.1.0's batch).
CREATE OR REPLACE FUNCTION queen.log_ack_batch_body_v1(p_tenant UUID, p_body JSONB) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT queen.log_ack_batch_of_v1(false, p_tenant, p_body->'acknowledgments', queen.log_body_group_v1(p_body), false)
$$;

-- GET /api/v1/pop with Queen's `partitions` (p_partitions, 1 to 1000): leases up to that many
-- partitions to one consumer of the group, `p_batch` messages in all, each partition as one pop
-- leases one, from one read of the queue's candidates (until 2026-12-07 each partition was a pop
-- of its own, the candidates read again for each: 100 partitions of a queue with 10,000 ready
-- ones cost 100 reads of 10,000):
-- queen.log_pop_of_v1 with p_pop_v2 as queen.log_pop_v2 (queen.log_pop_many_v2), else as
-- queen.log_pop_v1 (queen.log_pop_many_v1, as 0.1.0 popped). With more than one partition, every message carries one
-- shared lease id (queen.shared_leases) that acks and lease extends accept for each partition's own
-- lease. A named partition is one partition whatever p_partitions says.
CREATE OR REPLACE FUNCTION queen.log_pop_many_of_v1(p_pop_v2 BOOLEAN, p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT,
  p_batch INT, p_partitions INT) RETURNS queen.log_pop_answer
LANGUAGE plpgsql AS $$
DECLARE
  v_group TEXT := coalesce(p_group, '__QUEUE_MODE__');
  v_answer queen.log_pop_answer;
  v_shared UUID;
  v_lease UUID;
BEGIN
  IF p_partitions IS NULL OR p_partitions < 1 OR p_partitions > 1000 THEN
    PERFORM queen.fail_v1('log_invalid_partitions', 'partitions is a whole number from 1 to 1000.', NULL);
  END IF;
  v_answer := queen.log_pop_of_v1(p_pop_v2, p_tenant, p_queue, p_partition, p_group, p_batch, p_partitions);
  IF cardinality(v_answer.leases) < 2 THEN RETURN v_answer; END IF;
  v_shared := gen_random_uuid();
  INSERT INTO queen.shared_leases AS s (partition_id, consumer_group, shared_id, lease_id)
  SELECT u.partition_id, v_group, v_shared, u.lease_id FROM unnest(v_answer.partition_ids, v_answer.leases) u (partition_id, lease_id)
  ON CONFLICT (partition_id, consumer_group) DO UPDATE SET shared_id = EXCLUDED.shared_id, lease_id = EXCLUDED.lease_id;
  -- Each message names the shared id in place of its partition's lease, in the answer's text: this
  -- pop made those lease ids, so no payload stored before it holds one, and only the answer's own
  -- "leaseId" values match.
  FOREACH v_lease IN ARRAY v_answer.leases LOOP
    v_answer.messages := replace(v_answer.messages, '"leaseId": "' || v_lease || '"', '"leaseId": "' || v_shared || '"');
  END LOOP;
  v_answer.lease_id := v_shared;
  RETURN v_answer;
END $$;

-- GET /api/v1/pop with `partitions`, each partition as queen.log_pop_v1 leases one (0.1.0's pop).
CREATE OR REPLACE FUNCTION queen.log_pop_many_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT, p_partitions INT) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT (queen.log_pop_many_of_v1(false, p_tenant, p_queue, p_partition, p_group, p_batch, p_partitions)).messages::jsonb
$$;

-- retryDelay where a queue never set it (no queen.queue_options row, or a configure that named
-- none): 1000 ms, Queen MQ's default, so a failing consumer does not spin on its message.
CREATE OR REPLACE FUNCTION queen.log_retry_delay_default_v1() RETURNS INT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 1000 $$;

-- The wait after a message's `p_failures`-th failed delivery: `p_delay` ms; with p_max above it,
-- doubled at each failure after the first and capped at p_max (an exponential backoff).
CREATE OR REPLACE FUNCTION queen.log_retry_delay_ms_v1(p_delay INT, p_max INT, p_failures INT) RETURNS BIGINT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_max <= p_delay THEN p_delay::bigint
              ELSE least(p_max::numeric, p_delay::numeric * power(2::numeric, least(greatest(p_failures - 1, 0), 40)))::bigint END
$$;

-- A lease id that says where its lease is: the first six bytes (12 hex digits) of the partition's
-- id, the UUID version 8 (RFC 9562's custom layout), then 74 random bits. POST
-- /api/v1/lease/:leaseId/extend finds the group's row through the primary key's partitions of that
-- prefix (queen.log_extend_lease_v2), so no index on lease_id is needed, and a pop's write of a new
-- lease, like the ack's that ends it, is a HOT update (sql/migrations/058_lease_lookup.sql).
CREATE OR REPLACE FUNCTION queen.log_lease_id_v1(p_partition UUID) RETURNS UUID
LANGUAGE sql VOLATILE AS $$
  -- One expression (two random UUIDs rather than one read twice), so the planner inlines it into the
  -- pop's own statement instead of planning this body at every call (about 40 µs).
  SELECT (left(replace(p_partition::text, '-', ''), 12) || '8' || substr(replace(gen_random_uuid()::text, '-', ''), 14, 3)
          || substr(replace(gen_random_uuid()::text, '-', ''), 17, 16))::uuid
$$;

-- Which partitions a pop reads (sql/migrations/061_ready_partitions.sql): the ready ones, every
-- partition but those each group the queue knows (queen.consumer_groups) has finished. The rule,
-- kept by the functions below and by every push (which sets ready with last_seq):
--   a partition is not ready only if every known group has a row on it with nothing past its cursor.
-- So a known group never misses a message by reading ready partitions alone, and a group the
-- queue does not know is registered before its pop reads anything.

-- Registers a group with its queue (its first pop there, or its first since something moved it
-- back): every settled partition it has not finished is made ready again. The queue row's FOR NO
-- KEY UPDATE waits for a settling pass of the queue (FOR SHARE, queen.log_settle_ready_v1) to
-- commit and keeps the next one out until this commits, so no pass judges the queue's partitions
-- without this group; a push creating a partition takes FOR KEY SHARE, which does not wait on it.
-- The partitions are locked in the order pushes lock them (by name), so the two never wait on each
-- other in a circle. A queue deleted meanwhile registers nothing (the pop then finds nothing).
CREATE OR REPLACE FUNCTION queen.log_register_group_v1(p_queue_id UUID, p_group TEXT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM queen.queues q WHERE q.id = p_queue_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  INSERT INTO queen.consumer_groups (queue_id, consumer_group) VALUES (p_queue_id, p_group) ON CONFLICT DO NOTHING;
  UPDATE queen.partitions p SET ready = true
   WHERE p.id IN (SELECT s.id FROM queen.partitions s
                   WHERE s.queue_id = p_queue_id AND NOT s.ready
                     AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c
                                      WHERE c.partition_id = s.id AND c.consumer_group = p_group AND c.cursor_seq >= s.last_seq)
                   ORDER BY s.name FOR NO KEY UPDATE);
END $$;

-- The sweeper's settling of one shard (the partitions whose id's first 6 bits are p_shard, as
-- queen.log_retain_v1 splits them): each ready partition that every group its queue knows has
-- finished is set not ready, and pops stop reading it. Answers how many. Per queue, under the
-- queue row's FOR SHARE (a queue a registration or a configure holds is left for the next pass),
-- so the groups it judges by are all the queue's; the partitions FOR NO KEY UPDATE SKIP LOCKED,
-- judged again on the version locked: a push that bumped last_seq meanwhile keeps its partition
-- ready, and one pushing now is not waited for (it sets ready itself).
CREATE OR REPLACE FUNCTION queen.log_settle_ready_v1(p_shard SMALLINT) RETURNS INT
LANGUAGE plpgsql AS $$
DECLARE
  v_lo UUID := (lpad(to_hex(p_shard::int << 2), 2, '0') || '000000-0000-0000-0000-000000000000')::uuid;
  v_hi UUID := CASE WHEN p_shard < 63 THEN (lpad(to_hex((p_shard::int + 1) << 2), 2, '0') || '000000-0000-0000-0000-000000000000')::uuid END;
  v_queue UUID;
  v_n INT;
  v_settled INT := 0;
BEGIN
  -- The queues with a ready partition no group row is behind in (a probe a partition, kept one by
  -- its OFFSET 0), read without a lock: most passes lock nothing. A queue no group has popped
  -- settles nothing: no pop reads it, and each message pushed into a settled partition rewrites
  -- its row.
  FOR v_queue IN SELECT DISTINCT s.queue_id FROM queen.partitions s
                  WHERE s.id >= v_lo AND (v_hi IS NULL OR s.id < v_hi) AND s.ready
                    AND EXISTS (SELECT 1 FROM queen.consumer_groups g WHERE g.queue_id = s.queue_id)
                    AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c
                                     WHERE c.partition_id = s.id AND c.cursor_seq < s.last_seq OFFSET 0) LOOP
    PERFORM 1 FROM queen.queues q WHERE q.id = v_queue FOR SHARE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    -- The rule itself, in a statement begun after the lock: every group the queue knows has a row
    -- on the partition with nothing past its cursor.
    WITH settled AS (
      UPDATE queen.partitions p SET ready = false
       WHERE p.id IN (SELECT s.id FROM queen.partitions s
                       WHERE s.queue_id = v_queue AND s.ready AND s.id >= v_lo AND (v_hi IS NULL OR s.id < v_hi)
                         AND NOT EXISTS (SELECT 1 FROM queen.consumer_groups g WHERE g.queue_id = s.queue_id
                                          AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c
                                                           WHERE c.partition_id = s.id AND c.consumer_group = g.consumer_group
                                                             AND c.cursor_seq >= s.last_seq))
                       FOR NO KEY UPDATE SKIP LOCKED)
      RETURNING 1)
    SELECT count(*)::int INTO v_n FROM settled;
    v_settled := v_settled + v_n;
  END LOOP;
  RETURN v_settled;
END $$;

-- GET /api/v1/pop: leases the next `p_batch` messages of one partition to one consumer of the
-- group. Which partition: a ready one (above) with messages past the group's cursor and no live
-- lease, the least recently leased first (so consumers rotate over partitions), taken with SKIP LOCKED (a
-- partition another consumer is popping or acking right now is simply not a candidate).
-- Answers queen.log_pop_answer: the messages as a JSON array's text ('[]' when nothing is
-- available), the first partition leased, its lease and its queue, and every partition leased
-- with its lease.
--
-- A lease covers the messages it handed out. It ends when every leased message is settled by an
-- ack, or when it expires: the pop that then takes the partition over first settles the lapsed lease
-- (queen.log_lapse_lease_v1: each message it held unacked counts one failed delivery, and one past
-- the queue's retry_limit is dead-lettered), then leases what is left. A group seen for the first
-- time starts at the beginning of the partition: consumer groups each see every message.
--
-- One body for both generations: p_v2 false is queen.log_pop_v1, 0.1.0's pop (a rolling upgrade's
-- 0.1 processes call it) with its reads, row locks and writes: its queue read without options, its
-- batch read and then its answer read by seq = ANY, its random lease id and updated_at; it shares
-- v2's candidate statement, whose retry-gate probe is off for it (the statement still names
-- queen.consumer_retry_at). p_v2 is queen.log_pop_v2, which adds a
-- moving tenant's refusal, two of the queue options (sql/migrations/051_queue_options.sql): retryDelay
-- (a partition whose group acked a message `failed` is not leased to the group again before its
-- queen.consumer_retry_at; 1000 ms where the queue set none; with retryDelay 0 the row is not
-- read) and encryption (a message whose payload is stored encrypted
-- carries "sealed": true, for the API to open; it never opens in SQL), the push's trace context
-- (traceId, traceparent), lease ids that name their partition, and one read of the batch. A flag
-- rather than shared pieces: every PL/pgSQL call is a layer of expression set-up per transaction
-- on the hot path, and an untaken branch costs nothing.
CREATE OR REPLACE FUNCTION queen.log_pop_of_v1(p_v2 BOOLEAN, p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT,
  p_partitions INT)
RETURNS queen.log_pop_answer LANGUAGE plpgsql AS $$
DECLARE
  v_group TEXT := coalesce(p_group, '__QUEUE_MODE__');
  v_queue queen.queues;
  v_cands UUID[];
  v_candidate UUID;
  v_unseen UUID[];
  v_pc queen.partition_consumers;
  v_seqs BIGINT[];
  v_out TEXT;
  v_name TEXT;
  v_lease UUID;
  v_now TIMESTAMPTZ;
  v_expires TIMESTAMPTZ;
  v_lapsed BOOLEAN;
  v_found RECORD;
  v_delay INT := 0;
  v_window INT := 0;
  v_due_by TIMESTAMPTZ := 'infinity';
  v_quiet_by TIMESTAMPTZ := 'infinity';
  v_retry_gate BOOLEAN := false;
  v_plan_mode TEXT;
  v_left INT := p_batch;
  v_leased INT := 0;
  v_answer queen.log_pop_answer := ROW('[]', NULL, NULL, NULL, NULL, '{}', '{}');
BEGIN
  IF p_v2 THEN
    PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  END IF;
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

  -- The queue and its delays (queen.queue_delays, below), in one statement; v2's with its retry gate.
  IF p_v2 THEN
    SELECT q AS queue, coalesce(d.delayed_processing, 0) AS delay, coalesce(d.window_buffer, 0) AS window_buffer,
           coalesce(o.retry_delay_ms, queen.log_retry_delay_default_v1()) > 0 AS retry_gate,
           EXISTS (SELECT 1 FROM queen.consumer_groups g WHERE g.queue_id = q.id AND g.consumer_group = v_group) AS known INTO v_found
      FROM queen.queues q LEFT JOIN queen.queue_delays d ON d.queue_id = q.id LEFT JOIN queen.queue_options o ON o.queue_id = q.id
     WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  ELSE
    -- 0.1.0 reads no queue option: no gate (the same row type as v2's, so v_found's fields keep their plans).
    SELECT q AS queue, coalesce(d.delayed_processing, 0) AS delay, coalesce(d.window_buffer, 0) AS window_buffer, false AS retry_gate,
           EXISTS (SELECT 1 FROM queen.consumer_groups g WHERE g.queue_id = q.id AND g.consumer_group = v_group) AS known INTO v_found
      FROM queen.queues q LEFT JOIN queen.queue_delays d ON d.queue_id = q.id
     WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  END IF;
  IF NOT FOUND THEN RETURN v_answer; END IF;
  -- A pop leases, so it writes, even when it finds nothing to lease this time: on a database that
  -- turned read-only (a demoted primary) it is refused as a push is (503 db_unavailable), rather
  -- than answering "nothing" and holding its consumer's long poll on a database no push reaches.
  IF current_setting('transaction_read_only') = 'on' THEN
    RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction', MESSAGE = 'cannot lease in a read-only transaction';
  END IF;
  v_queue := v_found.queue;
  v_delay := v_found.delay;
  v_window := v_found.window_buffer;
  v_retry_gate := v_found.retry_gate;
  IF NOT v_found.known THEN
    PERFORM queen.log_register_group_v1(v_queue.id, v_group);
  END IF;

  v_now := clock_timestamp();
  -- delayedProcessing: a message is delivered once it is that old (v_due_by: created at or before).
  -- windowBuffer: a partition is leased once its newest message is that old. The messages of a
  -- partition go in seq order, so a message not yet due holds back the ones behind it, and a
  -- partition is a candidate only when its next message (cursor_seq + 1: every earlier one is
  -- finished, and a message is never deleted but with its queue) is due.
  IF v_delay > 0 THEN v_due_by := v_now - make_interval(secs => v_delay); END IF;
  IF v_window > 0 THEN v_quiet_by := v_now - make_interval(secs => v_window); END IF;
  v_expires := v_now + make_interval(secs => v_queue.lease_time);

  -- The candidates, in the order they are offered: of the partitions this pop reads (the named
  -- one, else the queue's ready ones), those with a message past the group's cursor (cursor 0
  -- where the group has no row yet) and no live lease, the least recently leased first, then by
  -- name; and those the group has no row on yet (v_unseen).
  -- One pass of probes by key: each partition's group row and each message test is kept a probe
  -- whatever the plan by its OFFSET 0 (the planner neither flattens such a subquery into a join nor
  -- hashes it). As a join, a generic plan made for a queue of 10,000 ready partitions hashed every
  -- group row of the cell at every later pop of a small queue: 15 ms where the probes take 0.3. The
  -- retry gate's table holds a row only where a group acked `failed`, so the planner may hash it (a
  -- probe a row cost 4 µs more). A test of p_partition before each branch of the UNION ALL runs one
  -- of them; a test of a parameter before each delay's and the retry gate's probe leaves them out
  -- of a queue without them (and of 0.1.0's pop, which has no gate).
  -- Being probes, its generic plan is the right one for any queue, so it is planned once a
  -- session: left to choose, PostgreSQL planned it at every pop (about 150 µs), its custom plan
  -- pruning the UNION ALL branch the parameter rules out. It is planned with the statistics of
  -- that moment, though: a table ANALYZEd while empty (reltuples 0, where one never analyzed is
  -- assumed 10 pages) is scanned rather than probed, and stays so in the session's plan until its
  -- next ANALYZE (autovacuum's, after 50 rows and 10 % changed). bench:pop-partitions, which
  -- ANALYZEs before a group's first pop, once met 51 ms a pop of 1,000 partitions this way.
  -- Planned with sequential scans off it cost about 30 µs more a pop (index scans start dearer
  -- than scans of empty tables), so it is left to autovacuum.
  v_plan_mode := current_setting('plan_cache_mode');
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  SELECT array_agg(p.id ORDER BY c.last_leased_at NULLS FIRST, p.name) FILTER (WHERE
           (c.lease_id IS NULL OR c.lease_expires_at <= v_now)
           AND p.last_seq > coalesce(c.cursor_seq, 0)
           AND (v_due_by = 'infinity' OR EXISTS (SELECT 1 FROM queen.messages m
                 WHERE m.partition_id = p.id AND m.seq = coalesce(c.cursor_seq, 0) + 1 AND m.created_at <= v_due_by OFFSET 0))
           AND (v_quiet_by = 'infinity' OR EXISTS (SELECT 1 FROM queen.messages m
                 WHERE m.partition_id = p.id AND m.seq = p.last_seq AND m.created_at <= v_quiet_by OFFSET 0))
           -- retryDelay: a partition whose group acked a message `failed` waits until retry_at.
           AND (NOT v_retry_gate OR NOT EXISTS (SELECT 1 FROM queen.consumer_retry_at r
                 WHERE r.partition_id = p.id AND r.consumer_group = v_group AND r.retry_at > v_now))),
         array_agg(p.id) FILTER (WHERE c.consumer_group IS NULL)
    INTO v_cands, v_unseen
    FROM (SELECT p.id, p.name, p.last_seq FROM queen.partitions p
           WHERE p_partition IS NULL AND p.queue_id = v_queue.id AND p.ready
          UNION ALL
          SELECT p.id, p.name, p.last_seq FROM queen.partitions p
           WHERE p_partition IS NOT NULL AND p.queue_id = v_queue.id AND p.name = p_partition) p
    LEFT JOIN LATERAL (SELECT c.consumer_group, c.cursor_seq, c.lease_id, c.lease_expires_at, c.last_leased_at
                         FROM queen.partition_consumers c
                        WHERE c.partition_id = p.id AND c.consumer_group = v_group OFFSET 0) c ON true;
  PERFORM set_config('plan_cache_mode', v_plan_mode, true);

  -- The group's row on each of them it has none on (v_unseen, just read; ON CONFLICT covers a pop
  -- of the group creating it meanwhile), created on first sight, also where the partition is no
  -- candidate yet: a row behind a removed head is one the sweeper's retention moves to the first
  -- retained message, which a delayed queue's pop needs. Each partition a row is created for is
  -- locked FOR KEY SHARE (the lock the foreign key's check takes anyway): a pop racing its queue's
  -- DELETE either holds the partition, and the delete waits for it, or waits for the delete and
  -- skips the partition it removed. Before, the INSERT's foreign-key check met the committed delete
  -- and broke partition_consumers_partition_id_fkey, a 500; now the pop of a queue deleted under it
  -- answers what the pop of a missing queue answers: nothing (204).
  IF v_unseen IS NOT NULL THEN
    INSERT INTO queen.partition_consumers (partition_id, consumer_group)
    SELECT p.id, v_group FROM queen.partitions p WHERE p.id = ANY (v_unseen) FOR KEY SHARE OF p
    ON CONFLICT DO NOTHING;
  END IF;
  IF v_cands IS NULL THEN RETURN v_answer; END IF;

  -- The first p_partitions candidates whose group row this pop can lock (SKIP LOCKED: a partition
  -- another consumer is popping or acking right now is simply passed over), each judged again on
  -- the version locked: another pop may have leased it, or an ack finished it or set its retry
  -- gate, since the read above. Each is leased what is left of p_batch; one read of the candidates
  -- serves them all.
  FOREACH v_candidate IN ARRAY v_cands LOOP
    SELECT c.* INTO v_pc FROM queen.partition_consumers c
     WHERE c.partition_id = v_candidate AND c.consumer_group = v_group
       AND (c.lease_id IS NULL OR c.lease_expires_at <= v_now)
       AND EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = c.partition_id AND p.last_seq > c.cursor_seq)
       AND (NOT v_retry_gate OR NOT EXISTS (SELECT 1 FROM queen.consumer_retry_at r
             WHERE r.partition_id = c.partition_id AND r.consumer_group = c.consumer_group AND r.retry_at > v_now))
       FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;

    -- A lapsed lease is settled here, under the row lock this pop holds, before anything is
    -- handed out again: this is where its expiry is noticed, and clearing it in the same
    -- transaction is what makes it count once.
    v_lapsed := v_pc.lease_id IS NOT NULL;
    IF v_lapsed THEN
      PERFORM queen.log_lapse_lease_v1(v_pc.partition_id, v_group, v_queue.retry_limit, v_now);
      SELECT c.* INTO v_pc FROM queen.partition_consumers c
       WHERE c.partition_id = v_pc.partition_id AND c.consumer_group = v_group;
    END IF;
    -- The partition's name: its messages name it, and so does the answer's top.
    SELECT p.name INTO v_name FROM queen.partitions p WHERE p.id = v_pc.partition_id;

    -- Past the cursor, minus what was finished ahead of it; with a delay, up to the first message
    -- not yet due.
    IF p_v2 THEN
      -- The answer is built from the same rows, read once in (partition_id, seq) order: a second
      -- read of the batch by its seqs (seq = ANY, v1's below) went, under a session's cached generic
      -- plan, through the partition's transactionId index and filtered the partition's whole history
      -- (test/log/popCost.test.ts).
      v_lease := queen.log_lease_id_v1(v_pc.partition_id);
      -- Queen's message (id, transactionId, traceId, data, producerSub, createdAt, partitionId,
      -- partition, leaseId, consumerGroup) and the cell's additions (queue, leaseExpiresAt, retryCount,
      -- traceparent: the W3C context of the request that pushed it, docs/tracing.md).
      -- The answer is JSON text, written as jsonb writes it (keys by length, then bytes: "id",
      -- "data", then the rest) and the API sends it as it is: a jsonb answer took each payload
      -- apart twice (into its object, then into the array) and put it together again to be written
      -- out, about 30 µs a message of 1.8 KB of JSON (test/log/popAnswer.test.ts holds the two
      -- texts equal). Each payload is written once, as it is stored.
      -- Each row's failures and sealed mark are a probe by key: the statement runs under its
      -- generic plan (planned once a session, not at every pop: the planner put about 500 µs into
      -- it each time, since a LIMIT of a parameter makes the generic plan look dearer than any
      -- custom one), and a plan of probes stays a plan of probes (the candidates' statement above
      -- says when it does not).
      v_plan_mode := current_setting('plan_cache_mode');
      PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
      SELECT array_agg(n.seq ORDER BY n.seq),
             '[' || string_agg('{"id": "' || queen.log_message_id_v1(n.partition_id, n.seq) || '", "data": ' || coalesce(n.payload::text, 'null')
               || ', ' || substr((jsonb_build_object(
               'transactionId', n.transaction_id, 'traceId', n.trace_id,
               'traceparent', queen.log_traceparent_v1(n.trace_id, n.span_id),
               'producerSub', NULL, 'partitionId', n.partition_id, 'queue', v_queue.name, 'partition', v_name,
               'leaseId', v_lease, 'leaseExpiresAt', queen.ts_v1(v_expires),
               'consumerGroup', v_group, 'createdAt', queen.ts_v1(n.created_at),
               'retryCount', coalesce((SELECT f.failures FROM queen.message_failures f
                                        WHERE f.partition_id = n.partition_id AND f.consumer_group = v_group AND f.seq = n.seq), 0))
             -- A payload stored encrypted (queen.sealed_messages) is marked for the API to open.
             || CASE WHEN (SELECT true FROM queen.sealed_messages s WHERE s.partition_id = n.partition_id AND s.seq = n.seq)
                     THEN '{"sealed": true}'::jsonb ELSE '{}'::jsonb END)::text, 2), ', ' ORDER BY n.seq) || ']'
        INTO v_seqs, v_out
        FROM (SELECT m.*, bool_and(v_due_by = 'infinity' OR m.created_at <= v_due_by) OVER (ORDER BY m.seq) AS due FROM (
                SELECT m.* FROM queen.messages m
                 WHERE m.partition_id = v_pc.partition_id AND m.seq > v_pc.cursor_seq AND m.seq <> ALL (v_pc.done_seqs)
                 ORDER BY m.seq LIMIT v_left) m) n
       WHERE n.due;
      PERFORM set_config('plan_cache_mode', v_plan_mode, true);
    ELSIF v_due_by = 'infinity' THEN
      SELECT array_agg(s.seq ORDER BY s.seq) INTO v_seqs FROM (
        SELECT m.seq FROM queen.messages m
         WHERE m.partition_id = v_pc.partition_id AND m.seq > v_pc.cursor_seq AND m.seq <> ALL (v_pc.done_seqs)
         ORDER BY m.seq LIMIT v_left
      ) s;
    ELSE
      SELECT array_agg(s.seq ORDER BY s.seq) INTO v_seqs FROM (
        SELECT n.seq, bool_and(n.created_at <= v_due_by) OVER (ORDER BY n.seq) AS due FROM (
          SELECT m.seq, m.created_at FROM queen.messages m
           WHERE m.partition_id = v_pc.partition_id AND m.seq > v_pc.cursor_seq AND m.seq <> ALL (v_pc.done_seqs)
           ORDER BY m.seq LIMIT v_left
        ) n
      ) s WHERE s.due;
    END IF;
    -- Nothing to hand out here after all (the lapse just settled dead-lettered the partition's last
    -- messages): the next candidate may have some. The row stays locked to this transaction's end.
    CONTINUE WHEN v_seqs IS NULL;

    IF p_v2 THEN
      -- updated_at (the row's last column) is left as it was, by the ack too: a HOT update logs the new
      -- version less the bytes it shares with the old one at either end, so a row whose tail is
      -- unchanged logs only the lease's middle. last_leased_at says when the group last read.
      UPDATE queen.partition_consumers
         SET lease_id = v_lease, lease_expires_at = v_expires, lease_seqs = v_seqs, lease_failed = '{}',
             last_leased_at = v_now, deliveries = deliveries + cardinality(v_seqs)
       WHERE partition_id = v_pc.partition_id AND consumer_group = v_group;
    ELSE
      -- 0.1.0's lease (a random id) and its answer, read again by the batch's seqs.
      v_lease := gen_random_uuid();
      UPDATE queen.partition_consumers
         SET lease_id = v_lease, lease_expires_at = v_expires, lease_seqs = v_seqs, lease_failed = '{}',
             last_leased_at = v_now, deliveries = deliveries + cardinality(v_seqs), updated_at = v_now
       WHERE partition_id = v_pc.partition_id AND consumer_group = v_group;
      v_out := (
        -- Queen's message (id, transactionId, traceId, data, producerSub, createdAt, partitionId,
        -- partition, leaseId, consumerGroup) and the cell's additions (queue, leaseExpiresAt, retryCount).
        SELECT jsonb_agg(jsonb_build_object(
                 'id', queen.log_message_id_v1(m.partition_id, m.seq), 'transactionId', m.transaction_id, 'traceId', NULL,
                 'data', m.payload, 'producerSub', NULL, 'partitionId', m.partition_id, 'queue', v_queue.name,
                 'partition', p.name, 'leaseId', v_lease, 'leaseExpiresAt', queen.ts_v1(v_expires),
                 'consumerGroup', v_group, 'createdAt', queen.ts_v1(m.created_at),
                 'retryCount', coalesce(f.failures, 0)) ORDER BY m.seq)
          FROM queen.messages m
          JOIN queen.partitions p ON p.id = m.partition_id
          LEFT JOIN queen.message_failures f ON f.partition_id = m.partition_id AND f.consumer_group = v_group AND f.seq = m.seq
         WHERE m.partition_id = v_pc.partition_id AND m.seq = ANY (v_seqs))::text;
    END IF;
    -- The first partition leased is the answer's at its top (Queen's); the arrays join as text.
    IF v_leased = 0 THEN
      v_answer := ROW(v_out, v_name, v_pc.partition_id, v_lease, v_queue.name, ARRAY[v_lease], ARRAY[v_pc.partition_id]);
    ELSE
      v_answer.messages := left(v_answer.messages, -1) || ', ' || substr(v_out, 2);
      v_answer.leases := v_answer.leases || v_lease;
      v_answer.partition_ids := v_answer.partition_ids || v_pc.partition_id;
    END IF;
    -- jsonb's cap on an array (268,435,455 bytes), which the API meets by asking for half the batch:
    -- PostgreSQL's own bound on text is 1 GiB, too much to hand a worker.
    IF octet_length(v_answer.messages) > 268435455 THEN
      RAISE EXCEPTION USING ERRCODE = 'program_limit_exceeded', MESSAGE = 'the pop''s answer passes 268435455 bytes';
    END IF;
    v_leased := v_leased + 1;
    v_left := v_left - cardinality(v_seqs);
    EXIT WHEN v_leased >= p_partitions OR v_left <= 0;
  END LOOP;
  RETURN v_answer;
END $$;

-- 0.1.0's pop (queen.log_pop_of_v1 without p_v2). A SQL function the planner inlines into the
-- caller's statement: no call layer over the body.
CREATE OR REPLACE FUNCTION queen.log_pop_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT (queen.log_pop_of_v1(false, p_tenant, p_queue, p_partition, p_group, p_batch, 1)).messages::jsonb
$$;

-- The pop (queen.log_pop_of_v1 with p_v2) as a jsonb array, for a caller that reads the messages
-- in SQL; inlined likewise.
CREATE OR REPLACE FUNCTION queen.log_pop_v2(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT (queen.log_pop_of_v1(true, p_tenant, p_queue, p_partition, p_group, p_batch, 1)).messages::jsonb
$$;

-- The pop of one partition the API sends (LOG_POP): queen.log_pop_v2's messages as the JSON text
-- it answers, beside the partition, lease and queue Queen's answer names at its top.
CREATE OR REPLACE FUNCTION queen.log_pop_v3(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT)
RETURNS queen.log_pop_answer LANGUAGE sql AS $$
  SELECT queen.log_pop_of_v1(true, p_tenant, p_queue, p_partition, p_group, p_batch, 1)
$$;

-- The group's row with its lease released when every message the lease holds is settled (passed by
-- the cursor, finished ahead of it, or acked `failed` and owed again): the partition goes back to
-- the group now, not at expiry.
CREATE OR REPLACE FUNCTION queen.log_release_settled_v1(p_pc queen.partition_consumers) RETURNS queen.partition_consumers
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM unnest(p_pc.lease_seqs) s
                  WHERE s > p_pc.cursor_seq AND s <> ALL (p_pc.done_seqs) AND s <> ALL (p_pc.lease_failed)) THEN
    p_pc.lease_id := NULL;
    p_pc.lease_expires_at := NULL;
    p_pc.lease_seqs := '{}';
    p_pc.lease_failed := '{}';
  END IF;
  RETURN p_pc;
END $$;

-- Whether p_shared is the shared id a pop of several partitions handed p_lease out under. A
-- function, so the ack step's check of its lease stays a simple expression that stops at
-- `v_lease <> v_pc.lease_id`: with the sub-SELECT written inline, the whole condition was a query
-- planned afresh at every ack (about 15 µs), even when the lease was the row's own.
CREATE OR REPLACE FUNCTION queen.log_lease_shared_v1(p_pid UUID, p_group TEXT, p_shared UUID, p_lease UUID) RETURNS BOOLEAN
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM queen.shared_leases s
                  WHERE s.partition_id = p_pid AND s.consumer_group = p_group AND s.shared_id = p_shared AND s.lease_id = p_lease)
$$;

-- One ack, already validated (log_check_ack_v1), decided on the group's row. The cases, in the order
-- they are decided:
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
--
-- p_v2 false is queen.log_ack_one_v1, 0.1.0's ack, with its reads, locks and writes: the row read
-- FOR NO KEY UPDATE and written here, updated_at with it. p_v2 adds the queue's retryDelay (a `failed` ack
-- that leaves the message for redelivery holds the group's partition back,
-- queen.consumer_retry_at, for the delay) and takes the decision on the group's row as the caller
-- holds it in memory: `p_pc` is the row as the acks before this one in the same call left it (read
-- under its lock), or NULL, and then it is read here FOR NO KEY UPDATE as v1 reads it. Nothing is
-- then written to queen.partition_consumers: the answer, the row as this ack leaves it (o_pc, NULL
-- when the row was never read), and whether the ack applied (o_applied: o_pc must be written,
-- queen.log_ack_write_v1). Why: a batch of ten acks of one lease wrote the row ten times, nine of
-- them a fresh version to lock again and a foreign-key check of partitions (the row's xmin was this
-- transaction's); now once (npm run bench:log, ack: bench/README.md).
CREATE OR REPLACE FUNCTION queen.log_ack_step_of_v1(p_v2 BOOLEAN, p_tenant UUID, a JSONB, p_index INT, p_raise BOOLEAN,
  p_pc queen.partition_consumers, OUT o_answer JSONB, OUT o_pc queen.partition_consumers, OUT o_applied BOOLEAN)
LANGUAGE plpgsql AS $$
DECLARE
  v_pid UUID := (a->>'partitionId')::uuid;
  v_group TEXT := a->>'consumerGroup';
  v_lease UUID := (a->>'leaseId')::uuid;
  v_seq BIGINT;
  v_pc queen.partition_consumers;
  v_retry_limit INT;
  v_retry_delay INT;
  v_retry_max INT;
  v_failures INT;
  v_reason TEXT;
  v_now TIMESTAMPTZ := clock_timestamp();
  v_dead BOOLEAN := false;
  v_finished BOOLEAN := false;
BEGIN
  o_pc := p_pc;
  o_applied := false;
  -- Only through the tenant's own queues: everything below touches v_pid only once this found it.
  SELECT m.seq INTO v_seq FROM queen.messages m
    JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE m.partition_id = v_pid AND m.transaction_id = a->>'transactionId' AND q.tenant_id = p_tenant;
  IF v_seq IS NULL THEN
    v_reason := 'not_found';
  ELSE
    IF p_pc.partition_id IS NOT NULL THEN
      v_pc := p_pc;
    ELSE
      SELECT * INTO v_pc FROM queen.partition_consumers c
       WHERE c.partition_id = v_pid AND c.consumer_group = v_group FOR NO KEY UPDATE;
    END IF;
    o_pc := v_pc;
    IF v_pc.partition_id IS NULL THEN
      v_reason := 'not_leased';
    ELSIF v_seq <= v_pc.cursor_seq OR v_seq = ANY (v_pc.done_seqs) THEN
      v_reason := 'already_acked';
    ELSIF v_pc.lease_id IS NULL OR v_pc.lease_expires_at <= v_now THEN
      v_reason := CASE WHEN v_lease IS NOT NULL OR v_pc.lease_id IS NOT NULL THEN 'lease_expired' ELSE 'not_leased' END;
    ELSIF v_lease IS NOT NULL AND v_lease <> v_pc.lease_id AND NOT queen.log_lease_shared_v1(v_pid, v_group, v_lease, v_pc.lease_id) THEN
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
    o_answer := jsonb_build_object('ok', false, 'success', false, 'error', v_reason, 'reason', 'ack_failed', 'ackReason', v_reason,
      'transactionId', a->'transactionId', 'partitionId', a->'partitionId', 'consumerGroup', v_group, 'status', a->'status');
    RETURN;
  END IF;

  IF a->>'status' = 'completed' THEN
    v_finished := true;
    v_pc.completed := v_pc.completed + 1;
  ELSE
    IF p_v2 THEN
      SELECT q.retry_limit, coalesce(o.retry_delay_ms, queen.log_retry_delay_default_v1()), coalesce(o.retry_delay_max_ms, 0) INTO v_retry_limit, v_retry_delay, v_retry_max
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id LEFT JOIN queen.queue_options o ON o.queue_id = q.id
       WHERE p.id = v_pid;
    ELSE
      -- 0.1.0 reads no queue option: no retryDelay, so no gate below.
      SELECT q.retry_limit, 0, 0 INTO v_retry_limit, v_retry_delay, v_retry_max
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = v_pid;
    END IF;
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
      -- retryDelay: the group's partition (and so this message, the first unfinished one once the
      -- lease ends) waits queen.log_retry_delay_ms_v1 from now; a later failure may only extend it.
      IF v_retry_delay > 0 THEN
        INSERT INTO queen.consumer_retry_at AS r (partition_id, consumer_group, retry_at)
        VALUES (v_pid, v_group, v_now + make_interval(secs => queen.log_retry_delay_ms_v1(v_retry_delay, v_retry_max, v_failures) / 1000.0))
        ON CONFLICT (partition_id, consumer_group) DO UPDATE SET retry_at = greatest(r.retry_at, EXCLUDED.retry_at);
      END IF;
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

  v_pc := queen.log_release_settled_v1(v_pc);
  IF NOT p_v2 THEN
    UPDATE queen.partition_consumers
       SET cursor_seq = v_pc.cursor_seq, done_seqs = v_pc.done_seqs, lease_id = v_pc.lease_id,
           lease_expires_at = v_pc.lease_expires_at, lease_seqs = v_pc.lease_seqs, lease_failed = v_pc.lease_failed,
           completed = v_pc.completed, failures = v_pc.failures, dead_letters = v_pc.dead_letters, updated_at = v_now
     WHERE partition_id = v_pid AND consumer_group = v_group;
  END IF;
  o_pc := v_pc;
  o_applied := true;
  o_answer := jsonb_build_object('ok', true, 'success', true, 'transactionId', a->'transactionId', 'partitionId', v_pid,
    'consumerGroup', v_group, 'status', a->'status', 'deadLetter', v_dead);
END $$;

-- 0.1.0's ack (queen.log_ack_step_of_v1 without p_v2: the row read and written at each ack). A SQL
-- function the planner inlines into the caller's expression.
CREATE OR REPLACE FUNCTION queen.log_ack_one_v1(p_tenant UUID, a JSONB, p_index INT, p_raise BOOLEAN) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT (queen.log_ack_step_of_v1(false, p_tenant, a, p_index, p_raise, NULL::queen.partition_consumers)).o_answer
$$;

-- The group's row as queen.log_ack_step_of_v1 left it, written: the columns an ack changes (not
-- updated_at: see queen.log_pop_of_v1).
CREATE OR REPLACE FUNCTION queen.log_ack_write_v1(p_pc queen.partition_consumers) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE queen.partition_consumers
     SET cursor_seq = p_pc.cursor_seq, done_seqs = p_pc.done_seqs, lease_id = p_pc.lease_id,
         lease_expires_at = p_pc.lease_expires_at, lease_seqs = p_pc.lease_seqs, lease_failed = p_pc.lease_failed,
         completed = p_pc.completed, failures = p_pc.failures, dead_letters = p_pc.dead_letters
   WHERE partition_id = p_pc.partition_id AND consumer_group = p_pc.consumer_group;
END $$;

-- queen.log_ack_one_v1 with the queue's retryDelay (queen.log_ack_step_of_v1), its row written at once.
CREATE OR REPLACE FUNCTION queen.log_ack_one_v2(p_tenant UUID, a JSONB, p_index INT, p_raise BOOLEAN) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  s RECORD;
BEGIN
  SELECT * INTO s FROM queen.log_ack_step_of_v1(true, p_tenant, a, p_index, p_raise, NULL);
  IF s.o_applied THEN PERFORM queen.log_ack_write_v1(s.o_pc); END IF;
  RETURN s.o_answer;
END $$;

-- The ack batch's common case in a handful of statements: two or more acks (one alone costs less
-- through its step), every one `completed`, of one group's row (one partitionId and
-- consumerGroup), under one live lease (the same leaseId in each, or none in any), distinct
-- messages, each held by that lease and not yet settled. What
-- queen.log_ack_step_of_v1 would decide for each is then known in advance (applied, no dead letter),
-- and the row moves once: the cursor past every message it can now pass, the rest recorded ahead
-- of it, the lease released when nothing it holds is left. Answers exactly what the steps would,
-- or NULL for anything else (a failed ack, a second row, a shared lease, a message not found or not
-- leased, ...), and queen.log_ack_batch_v2 then takes every ack through its step, so each
-- refusal keeps one definition. On unless the session says SET queen.log_ack_fast_path = off
-- (test/log/ackFastPath.test.ts runs its cases both ways and holds the two to the same answers and
-- rows). Why: a batch of ten cost about 1,500 µs of PostgreSQL through its steps, 1,200 this way
-- (pg_stat_statements, one client).
CREATE OR REPLACE FUNCTION queen.log_ack_fast_v1(p_tenant UUID, p_norm JSONB[]) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_first JSONB := p_norm[1];
  v_pid UUID;
  v_group TEXT := v_first->>'consumerGroup';
  v_lease UUID := (v_first->>'leaseId')::uuid;
  v_n INT := cardinality(p_norm);
  v_pc queen.partition_consumers;
  v_seqs BIGINT[];
  v_all BIGINT[];
  v_now TIMESTAMPTZ := clock_timestamp();
  v_plan_mode TEXT;
BEGIN
  IF v_n < 2 OR current_setting('queen.log_ack_fast_path', true) = 'off'
     OR EXISTS (SELECT 1 FROM unnest(p_norm) a
                 WHERE a->>'status' <> 'completed' OR a->>'partitionId' <> v_first->>'partitionId'
                    OR a->>'consumerGroup' <> v_group OR (a->>'leaseId') IS DISTINCT FROM (v_first->>'leaseId')) THEN
    RETURN NULL;
  END IF;
  v_pid := (v_first->>'partitionId')::uuid;
  SELECT c.* INTO v_pc FROM queen.partition_consumers c
   WHERE c.partition_id = v_pid AND c.consumer_group = v_group
     AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                  WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
     FOR NO KEY UPDATE OF c;
  IF v_pc.partition_id IS NULL OR v_pc.lease_id IS NULL OR v_pc.lease_expires_at <= v_now
     OR (v_lease IS NOT NULL AND v_lease <> v_pc.lease_id) THEN
    RETURN NULL;
  END IF;
  -- The acks' messages in request order (NULL where none); every one found, distinct, held and
  -- unsettled. Each a probe of the (partition, transactionId) key, under the generic plan, as the
  -- pop's read: a custom plan was made at every call (about 120 µs), and a generic plan of a join
  -- read the partition's whole log (4,000 buffers a batch in bench:log's pop+ack lane).
  v_plan_mode := current_setting('plan_cache_mode');
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  SELECT array_agg((SELECT m.seq FROM queen.messages m WHERE m.partition_id = v_pid AND m.transaction_id = t.a->>'transactionId')
                   ORDER BY t.i) INTO v_seqs
    FROM unnest(p_norm) WITH ORDINALITY t(a, i);
  PERFORM set_config('plan_cache_mode', v_plan_mode, true);
  IF (SELECT count(DISTINCT s) FROM unnest(v_seqs) s) <> v_n
     OR EXISTS (SELECT 1 FROM unnest(v_seqs) s
                 WHERE s IS NULL OR s <= v_pc.cursor_seq OR s = ANY (v_pc.done_seqs) OR s <> ALL (v_pc.lease_seqs) OR s = ANY (v_pc.lease_failed)) THEN
    RETURN NULL;
  END IF;
  -- The cursor passes every finished message it reaches; what stays ahead of it keeps the order
  -- the steps would have recorded it in.
  v_all := v_pc.done_seqs || v_seqs;
  -- A loop of simple expressions: as a query over generate_series it took a custom plan at every batch.
  WHILE v_pc.cursor_seq + 1 = ANY (v_all) LOOP
    v_pc.cursor_seq := v_pc.cursor_seq + 1;
  END LOOP;
  v_pc.done_seqs := coalesce((SELECT array_agg(s ORDER BY i) FROM unnest(v_all) WITH ORDINALITY u(s, i) WHERE s > v_pc.cursor_seq), '{}');
  v_pc.completed := v_pc.completed + v_n;
  v_pc := queen.log_release_settled_v1(v_pc);
  PERFORM queen.log_ack_write_v1(v_pc);
  RETURN (SELECT jsonb_agg(jsonb_build_object('ok', true, 'success', true, 'transactionId', a->'transactionId', 'partitionId', v_pid,
                                              'consumerGroup', v_group, 'status', a->'status', 'deadLetter', false) ORDER BY i)
            FROM unnest(p_norm) WITH ORDINALITY t(a, i));
END $$;

-- The ack batch of both generations: p_v2 false is queen.log_ack_batch_v1 (0.1.0's: each ack
-- through queen.log_ack_one_v1, its row read and written at each ack); p_v2 is queen.log_ack_batch_v2:
-- a moving tenant refused first, the fast path (queen.log_ack_fast_v1), and else
-- queen.log_ack_one_v2's decisions, in request order, each group's row kept in memory from one ack
-- to the next and written once at the end (the answers and the rows as one queen.log_ack_one_v2 per
-- ack leaves them: each ack sees what the ones before it did).
CREATE OR REPLACE FUNCTION queen.log_ack_batch_of_v1(p_v2 BOOLEAN, p_tenant UUID, p_acks JSONB, p_group JSONB, p_raise BOOLEAN)
RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_norm JSONB[];
  v_out JSONB[] := '{}';
  v_n INT;
  -- The rows read so far, by '<partitionId>/<group>', and whether an ack changed each.
  v_keys TEXT[] := '{}';
  v_rows queen.partition_consumers[] := '{}';
  v_dirty BOOLEAN[] := '{}';
  v_key TEXT;
  v_at INT;
  s RECORD;
  i INT;
  v_fast JSONB;
BEGIN
  -- 0.1.0's batch first, so that v2 tests its flag once (each test is an expression set up at every
  -- transaction).
  IF NOT p_v2 THEN
    v_norm := queen.log_check_acks_v1(p_acks, p_group);
    PERFORM queen.log_lock_consumers_v1(p_tenant, v_norm);
    FOR i IN 1 .. cardinality(v_norm) LOOP
      v_out := v_out || queen.log_ack_one_v1(p_tenant, v_norm[i], i - 1, p_raise);
    END LOOP;
    RETURN to_jsonb(v_out);
  END IF;
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  v_norm := queen.log_check_acks_v1(p_acks, p_group);
  v_n := cardinality(v_norm);
  v_fast := queen.log_ack_fast_v1(p_tenant, v_norm);
  IF v_fast IS NOT NULL THEN RETURN v_fast; END IF;
  PERFORM queen.log_lock_consumers_v1(p_tenant, v_norm);
  FOR i IN 1 .. v_n LOOP
    v_key := (v_norm[i]->>'partitionId') || '/' || (v_norm[i]->>'consumerGroup');
    v_at := array_position(v_keys, v_key);
    SELECT * INTO s FROM queen.log_ack_step_of_v1(true, p_tenant, v_norm[i], i - 1, p_raise, CASE WHEN v_at IS NOT NULL THEN v_rows[v_at] END);
    IF v_at IS NOT NULL THEN
      v_rows[v_at] := s.o_pc;
      v_dirty[v_at] := v_dirty[v_at] OR s.o_applied;
    ELSIF (s.o_pc).partition_id IS NOT NULL THEN
      v_keys := v_keys || v_key;
      v_rows := v_rows || s.o_pc;
      v_dirty := v_dirty || s.o_applied;
    END IF;
    v_out := v_out || s.o_answer;
  END LOOP;
  FOR i IN 1 .. cardinality(v_keys) LOOP
    IF v_dirty[i] THEN PERFORM queen.log_ack_write_v1(v_rows[i]); END IF;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;

-- The ack batch (queen.log_ack_batch_of_v1 with p_v2), a SQL call inlined into its statement.
CREATE OR REPLACE FUNCTION queen.log_ack_batch_v2(p_tenant UUID, p_acks JSONB, p_raise BOOLEAN DEFAULT false) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT queen.log_ack_batch_of_v1(true, p_tenant, p_acks, NULL, p_raise)
$$;

-- POST /api/v1/ack/batch's body (queen.log_ack_batch_body_v1) through queen.log_ack_batch_v2's body.
CREATE OR REPLACE FUNCTION queen.log_ack_batch_body_v2(p_tenant UUID, p_body JSONB) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT queen.log_ack_batch_of_v1(true, p_tenant, p_body->'acknowledgments', queen.log_body_group_v1(p_body), false)
$$;

-- queen.log_pop_many_v1 through queen.log_pop_v2.
CREATE OR REPLACE FUNCTION queen.log_pop_many_v2(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT, p_partitions INT) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT (queen.log_pop_many_of_v1(true, p_tenant, p_queue, p_partition, p_group, p_batch, p_partitions)).messages::jsonb
$$;

-- The pop of several partitions the API sends (LOG_POP): queen.log_pop_many_v2's messages as the
-- JSON text it answers, beside the first partition, the lease (shared) and the queue.
CREATE OR REPLACE FUNCTION queen.log_pop_many_v3(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT, p_partitions INT)
RETURNS queen.log_pop_answer LANGUAGE sql AS $$
  SELECT queen.log_pop_many_of_v1(true, p_tenant, p_queue, p_partition, p_group, p_batch, p_partitions)
$$;

-- Queen's server-side autoAck (?autoAck=true): the messages a pop just leased are acked `completed`
-- in the same statement, so they are consumed at delivery (nothing comes back if the consumer then
-- fails). Answers the messages with leaseId "" (no lease is left to ack or extend), as Queen does.
CREATE OR REPLACE FUNCTION queen.log_auto_ack_v1(p_tenant UUID, p_messages JSONB) RETURNS JSONB
LANGUAGE plpgsql AS $$
BEGIN
  IF jsonb_array_length(p_messages) = 0 THEN RETURN p_messages; END IF;
  PERFORM queen.log_ack_batch_v2(p_tenant, (
    SELECT jsonb_agg(jsonb_build_object('transactionId', e->'transactionId', 'partitionId', e->'partitionId', 'status', 'completed',
                                        'consumerGroup', e->'consumerGroup', 'leaseId', e->'leaseId') ORDER BY k)
      FROM jsonb_array_elements(p_messages) WITH ORDINALITY AS t (e, k)), false);
  RETURN (SELECT jsonb_agg(e || '{"leaseId": "", "leaseExpiresAt": null}'::jsonb ORDER BY k)
            FROM jsonb_array_elements(p_messages) WITH ORDINALITY AS t (e, k));
END $$;

-- GET /api/v1/pop?namespace=&task= (Queen's pop across queues): the tenant's queues whose
-- configured namespace and task match (an absent one matches any; at least one is given), higher
-- priority first, then the queue whose next message for the group is oldest, each popped as
-- queen.log_pop_many_v2 pops a queue (the same leases, fencing and counts) until one answers
-- messages. At most 1,000 queues are looked at, in that order.
CREATE OR REPLACE FUNCTION queen.log_pop_match_v1(p_tenant UUID, p_namespace TEXT, p_task TEXT, p_group TEXT, p_batch INT, p_partitions INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_group TEXT := coalesce(p_group, '__QUEUE_MODE__');
  v_out JSONB := '[]';
  r RECORD;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF coalesce(p_namespace, '') = '' AND coalesce(p_task, '') = '' THEN
    PERFORM queen.fail_v1('log_invalid_queue', 'A pop names a queue, or a namespace and/or a task.', NULL);
  END IF;
  FOR r IN
    SELECT q.name FROM queen.queues q JOIN queen.queue_options o ON o.queue_id = q.id
     WHERE q.tenant_id = p_tenant AND (coalesce(p_namespace, '') = '' OR o.namespace = p_namespace)
       AND (coalesce(p_task, '') = '' OR o.task = p_task)
     ORDER BY o.priority DESC,
              (SELECT min(m.created_at) FROM queen.partitions p
                 LEFT JOIN queen.partition_consumers c ON c.partition_id = p.id AND c.consumer_group = v_group
                 JOIN queen.messages m ON m.partition_id = p.id AND m.seq = coalesce(c.cursor_seq, 0) + 1
                WHERE p.queue_id = q.id) NULLS LAST,
              q.name
     LIMIT 1000
  LOOP
    v_out := queen.log_pop_many_v2(p_tenant, r.name, NULL, v_group, p_batch, p_partitions);
    EXIT WHEN jsonb_array_length(v_out) > 0;
  END LOOP;
  RETURN v_out;
END $$;
