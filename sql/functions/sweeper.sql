-- The sweeper's work: the fire of due timers, the prune of expired keys, the pass that claims a shard
-- and does both, and its gauges. The usage rollup is kv_usage.sql's; the log's gauges log_gauges.sql's.

-- The fire switch, read fresh by every sweeper pass. An absent row means on; only an explicit
-- false (the jsonb value, or {"enabled": false}) pauses delivery.
CREATE OR REPLACE FUNCTION queen.timers_fire_enabled_v1() RETURNS BOOLEAN
LANGUAGE sql STABLE AS $$
  SELECT NOT EXISTS (
    SELECT 1 FROM queen.system_state
    WHERE key = 'timers_fire_enabled'
      AND (value = 'false'::jsonb OR value = '"false"'::jsonb OR value -> 'enabled' = 'false'::jsonb))
$$;
-- Fire, the body of queen.timers_fire_v1 and queen.timers_fire_v3: the cell's oldest due timers, at
-- most p_limit, whatever their shard, each pushed into its tenant's log with the transactionId
-- 'timer:' || timer_id and deleted, in the caller's transaction: one claim, then per partition
-- one lock and one append of its timers (queen.log_append_v1: the duplicate check and the message
-- per timer, last_seq and the NOTIFY once), one delete. p_marks: the message carries its timer's trace context and a sealed
-- timer's seal mark (v3); without it, neither (v1, as 0.1.0 fired). Answers the timers it claimed
-- (for v3's links) and the fire's answer.
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
-- Measured (2026-12-07, npm run bench:fire, the fire step alone, 16 partitions): one log_push_v1
-- call per timer, about 10,000 timers a second; one append a partition, 34,000-37,000 at a batch of
-- 500 and 44,000-50,000 at 2,000, as fast as the one set-based statement it replaced (bench/README.md).
--
-- Every read of queen.messages in it is a probe by the (partition_id, transaction_id) unique key
-- (queen.log_append_v1's duplicate check, the seal marks'), so a cached plan is right however the
-- log has grown. (The set-based fire before 2026-12-07 checked the batch in one anti-join, which had
-- to be planned at each call: a generic plan costed while the log was young filtered every message
-- of the partition for each timer, 17 ms a fire with 100 messages in the log, 94 with 14,800.)
CREATE OR REPLACE FUNCTION queen.timers_fire_batch_v1(p_limit INT, p_marks BOOLEAN,
  OUT claimed queen.log_timers[], OUT answer JSONB)
LANGUAGE plpgsql SET enable_bitmapscan = off AS $$
DECLARE
  r RECORD;
  v_ids RECORD;
  v_tenants UUID[] := '{}';
  v_queues TEXT[] := '{}';
  v_parts TEXT[] := '{}';
  v_pids UUID[] := '{}';
  v_lasts BIGINT[] := '{}';
  v_fired INT;
  v_stored INT;
BEGIN
  SELECT array_agg(c.t ORDER BY (c.t).deliver_at, (c.t).timer_id) INTO claimed FROM (
    SELECT t FROM queen.log_timers t
    WHERE t.deliver_at <= now()
    ORDER BY t.deliver_at, t.timer_id
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED) c;
  IF claimed IS NULL THEN
    answer := jsonb_build_object('fired', 0, 'duplicates', 0, 'maxLateSeconds', 0);
    RETURN;
  END IF;
  v_fired := cardinality(claimed);
  -- The lock order: timers (held above), then partitions in ascending (tenant, queue, partition)
  -- order, each created on first use and locked once, as queen.log_lock_partitions_v1 does for one
  -- tenant, so a pass and a transaction-wire bundle pushing to the same partitions can never wait on
  -- each other in a circle, nor two sweepers. Each timer fires into its own tenant's queue.
  -- Each partition's timers, in claim order ((deliverAt, timerId), the order it numbers them in),
  -- through the one append (queen.log_append_v1); a timer's transactionId is 'timer:<id>', so a fire
  -- that already happened (the message stored before) stores nothing twice. With p_marks the
  -- schedule's trace context goes with the message (NULL for a timer scheduled without); 0.1.0's
  -- fire stores none.
  FOR r IN
    SELECT c.tenant_id, c.queue COLLATE "C" AS queue, c.partition COLLATE "C" AS partition,
           array_agg(c.payload ORDER BY c.deliver_at, c.timer_id) AS payloads,
           array_agg('timer:' || c.timer_id::text ORDER BY c.deliver_at, c.timer_id) AS txids,
           array_agg(CASE WHEN p_marks THEN c.trace_id END ORDER BY c.deliver_at, c.timer_id) AS trace_ids,
           array_agg(CASE WHEN p_marks THEN c.span_id END ORDER BY c.deliver_at, c.timer_id) AS span_ids
    FROM unnest(claimed) AS c GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  LOOP
    -- The log's own name rules, once per partition (a schedule checked them already).
    PERFORM queen.log_check_push_v1(r.queue, r.partition, NULL, NULL);
    -- Found and locked as a push does: a partition removed (its queue deleted, or emptied and
    -- removed by retention) between the look-up and the lock is created anew.
    v_ids := queen.log_lock_partition_v1(r.tenant_id, r.queue, r.partition);
    v_tenants := v_tenants || r.tenant_id;
    v_queues := v_queues || r.queue;
    v_parts := v_parts || r.partition;
    v_pids := v_pids || v_ids.p_id;
    v_lasts := v_lasts || v_ids.last_seq;
    PERFORM queen.log_append_v1(false, r.tenant_id, r.queue, r.partition, r.payloads, r.txids, r.trace_ids, r.span_ids);
  END LOOP;
  -- What was stored: each partition's last_seq moved past the one read under its lock by exactly
  -- the messages stored (the rest were duplicates).
  SELECT sum(p.last_seq - k.last_seq)::int INTO v_stored
    FROM unnest(v_pids, v_lasts) AS k(pid, last_seq) JOIN queen.partitions p ON p.id = k.pid;
  IF p_marks THEN
    -- The batch's sealed timers leave queen.sealed_timers with them (no foreign key: 054 says why),
    -- and a message stored from one holds the same sealed text: marked so the pop opens it. A
    -- duplicate (its message stored before, at or below the last_seq read under the lock) marks
    -- nothing again. Each message found by its (partition, transactionId) key.
    WITH unsealed AS (
      DELETE FROM queen.sealed_timers s USING unnest(claimed) AS t WHERE s.timer_id = t.timer_id
      RETURNING s.timer_id
    ), stored AS (
      SELECT k.pid, k.last_seq, (SELECT m.seq FROM queen.messages m
                                  WHERE m.partition_id = k.pid AND m.transaction_id = 'timer:' || u.timer_id::text OFFSET 0) AS seq
      FROM unsealed u
      JOIN unnest(claimed) AS t ON t.timer_id = u.timer_id
      JOIN unnest(v_tenants, v_queues, v_parts, v_pids, v_lasts) AS k(tenant_id, queue, partition, pid, last_seq)
        ON k.tenant_id = t.tenant_id AND k.queue = t.queue AND k.partition = t.partition
    )
    INSERT INTO queen.sealed_messages (partition_id, seq)
    SELECT s.pid, s.seq FROM stored s WHERE s.seq > s.last_seq;
  END IF;
  DELETE FROM queen.log_timers WHERE timer_id = ANY (ARRAY(SELECT c.timer_id FROM unnest(claimed) AS c));
  answer := jsonb_build_object('fired', v_fired, 'duplicates', v_fired - v_stored,
    'maxLateSeconds', extract(epoch FROM clock_timestamp() - claimed[1].deliver_at)::double precision);
END $$;

-- The fire of release 0.1.0, which knows neither sealed timers nor trace contexts: a sealed timer's
-- message is stored unmarked, its queen.sealed_timers row stays, and no message carries a trace.
CREATE OR REPLACE FUNCTION queen.timers_fire_v1(p_limit INT) RETURNS JSONB
LANGUAGE sql AS $$ SELECT b.answer FROM queen.timers_fire_batch_v1(p_limit, false) b $$;

-- Fire since encrypted timers and trace contexts: queen.timers_fire_v1, and each message stored from
-- a sealed timer (queen.sealed_timers: its payload is the API's sealed text, copied as it is) marked
-- in queen.sealed_messages in the same transaction, so the pop opens it, and the batch's rows of
-- queen.sealed_timers deleted with the timers (queen.timers_fire_batch_v1 with p_marks). No key is needed here. A timer that is a duplicate
-- (its message already stored) marks nothing again. The message carries its timer's trace context
-- (trace_id, span_id: the schedule's request, sql/migrations/056_trace_context.sql). When p_links > 0
-- (the sweeper traces: docs/tracing.md) it answers the trace context of the timers it fired, for its
-- span's links: `traced`, how many of them carry one (a schedule's request span), and `links`, at most
-- p_links distinct {traceId, spanId} (32 and 16 hex digits, the W3C forms). Ids only: nothing a client
-- wrote. 0 (tracing off) computes nothing more.
CREATE OR REPLACE FUNCTION queen.timers_fire_v3(p_limit INT, p_links INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_claimed queen.log_timers[];
  v_answer JSONB;
  v_traced INT;
  v_links JSONB := '[]';
BEGIN
  SELECT b.claimed, b.answer INTO v_claimed, v_answer FROM queen.timers_fire_batch_v1(p_limit, true) b;
  IF v_claimed IS NULL OR p_links <= 0 THEN
    RETURN v_answer;
  END IF;
  SELECT count(*)::int INTO v_traced FROM unnest(v_claimed) AS c WHERE c.trace_id IS NOT NULL AND c.span_id IS NOT NULL;
  IF v_traced > 0 THEN
    SELECT coalesce(jsonb_agg(jsonb_build_object('traceId', replace(l.trace_id::text, '-', ''), 'spanId', encode(l.span_id, 'hex'))), '[]')
      INTO v_links
      FROM (SELECT DISTINCT c.trace_id, c.span_id FROM unnest(v_claimed) AS c
            WHERE c.trace_id IS NOT NULL AND c.span_id IS NOT NULL LIMIT p_links) l;
  END IF;
  RETURN v_answer || jsonb_build_object('traced', v_traced, 'links', v_links);
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

-- One sweeper pass, one transaction: the body of queen.sweeper_pass_v1 and queen.sweeper_pass_v4.
-- Firing is cell-wide: the oldest due timers of the cell, at most p_fire_limit, unless the switch
-- says no (read here, fresh). The shards are for the rest: when p_prune, claim up to p_shard_count
-- shards not yet swept since p_since (the start of the caller's cycle; NULL = this instant, the
-- first pass of a cycle), least recently swept first, with FOR UPDATE SKIP LOCKED, held until commit
-- (two sweepers never work one shard at once, and a dead sweeper's claim ends with its connection),
-- prune their expired keys and mark them swept. A pass that claimed no shard and did not fill its
-- fire batch ends the caller's cycle; it answers when the cell's next future timer falls due, so the
-- caller sleeps no longer than that. claimedAtUs and finishedAtUs (epoch microseconds) are read from
-- the server's clock inside the claim, so a test can check that no two passes over one shard ever
-- overlapped.
--
-- p_retain false is 0.1.0's pass, statement for statement: it fires through queen.timers_fire_v1,
-- removes no message, and answers its keys alone (p_retention_default and p_links unread).
-- p_retain true is v4's: it fires through queen.timers_fire_v3 (a sealed timer's message marked
-- sealed; p_links > 0, the sweeper traces, adds the fired timers' `traced` count and trace-context
-- `links` to the answer, for the pass's span), and after the prune of each claimed shard's expired
-- keys, queen.log_retain_v1 removes the messages of the shard's partitions that are past keeping,
-- the stale consumer-group rows and the emptied partitions (sql/functions/retention.sql), at most
-- p_prune_limit per shard, with p_retention_default the cell's default retention in seconds
-- (QUEEN_LOG_RETENTION_SECONDS; 0: none); the answer adds what it removed. The shard claim is what
-- makes several sweepers share that work without two ever working one partition at once.
CREATE OR REPLACE FUNCTION queen.sweeper_pass_run_v1(
  p_since TIMESTAMPTZ, p_worker TEXT, p_shard_count INT, p_fire_limit INT, p_prune_limit INT, p_prune BOOLEAN,
  p_retain BOOLEAN, p_retention_default INT, p_links INT)
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
  v_retain JSONB;
  v_removed INT := 0;
  v_unfinished INT := 0;
  v_removed_bytes BIGINT := 0;
  v_retain_full BOOLEAN := false;
  v_retain_queues JSONB := '[]';
  v_retained_at TIMESTAMPTZ;
  v_groups INT := 0;
  v_partitions INT := 0;
  v_settled INT := 0;
  v_answer JSONB;
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
  IF v_fire_on AND p_retain THEN
    v_fire := queen.timers_fire_v3(p_fire_limit, p_links);
  ELSIF v_fire_on THEN
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
    IF p_retain THEN
      v_retained_at := clock_timestamp();
      FOREACH v_s IN ARRAY v_shards LOOP
        v_retain := queen.log_retain_v1(v_s, p_prune_limit, p_retention_default);
        v_groups := v_groups + (v_retain ->> 'groups')::int;
        v_partitions := v_partitions + (v_retain ->> 'partitions')::int;
        v_removed := v_removed + (v_retain ->> 'removed')::int;
        v_unfinished := v_unfinished + (v_retain ->> 'unfinished')::int;
        v_removed_bytes := v_removed_bytes + (v_retain ->> 'bytes')::bigint;
        v_retain_full := v_retain_full OR (v_retain ->> 'full')::boolean;
        v_retain_queues := v_retain_queues || (v_retain -> 'queues');
      END LOOP;
      -- Last, so the queue rows' FOR SHARE it takes is held only to this pass's commit.
      FOREACH v_s IN ARRAY v_shards LOOP
        v_settled := v_settled + queen.log_settle_ready_v1(v_s);
      END LOOP;
    END IF;
    UPDATE queen.sweeper_shards SET last_swept_at = now(), swept_by = p_worker WHERE shard = ANY (v_shards);
  END IF;
  IF v_shards IS NULL AND NOT (v_fire_on AND v_fired >= p_fire_limit) THEN
    -- The end of the caller's cycle: when the cell's next future timer falls due (one probe of
    -- idx_log_timers_due).
    SELECT t.deliver_at INTO v_next FROM queen.log_timers t WHERE t.deliver_at > now()
      ORDER BY t.deliver_at LIMIT 1;
  END IF;
  -- A pass that fired, pruned and removed nothing wrote only its own bookkeeping: losing that
  -- commit in a crash loses nothing, so it does not wait for the WAL flush. At 1,000 timers a second
  -- the sweeper wakes every few tens of ms and most passes are empty; each waiting for an fsync was
  -- measured (bench:timers, 2026-11-29) to cost CPU and fire lag on a 2-core machine. A pass that
  -- fired keeps the synchronous commit: a message a consumer has seen must survive a crash.
  IF v_fired = 0 AND v_pruned = 0 AND v_removed = 0 THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  -- pruneSeconds ends where the retention began (without retention, here).
  v_answer := jsonb_build_object(
    'since', v_since, 'shards', coalesce(to_jsonb(v_shards), '[]'::jsonb), 'fireEnabled', v_fire_on,
    'fired', v_fired, 'duplicates', (v_fire ->> 'duplicates')::int,
    'maxLateSeconds', (v_fire ->> 'maxLateSeconds')::double precision,
    'fireFull', v_fire_on AND v_fired >= p_fire_limit,
    'pruned', v_pruned, 'pruneFull', v_prune_full,
    'fireSeconds', extract(epoch FROM v_fired_at - v_claimed_at)::double precision,
    'pruneSeconds', extract(epoch FROM coalesce(v_retained_at, clock_timestamp()) - v_fired_at)::double precision,
    'claimedAtUs', (extract(epoch FROM v_claimed_at) * 1000000)::bigint,
    'finishedAtUs', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
    'nextDueInMs', (extract(epoch FROM v_next - clock_timestamp()) * 1000)::double precision);
  IF NOT p_retain THEN
    RETURN v_answer;
  END IF;
  RETURN v_answer || jsonb_build_object(
    'removed', v_removed, 'removedUnfinished', v_unfinished, 'removedBytes', v_removed_bytes,
    'retainFull', v_retain_full, 'retainQueues', v_retain_queues,
    'removedGroups', v_groups, 'removedPartitions', v_partitions, 'settledPartitions', v_settled,
    'retainSeconds', coalesce(extract(epoch FROM clock_timestamp() - v_retained_at)::double precision, 0))
    || jsonb_strip_nulls(jsonb_build_object('traced', v_fire -> 'traced', 'links', v_fire -> 'links'));
END $$;

-- 0.1.0's pass: no retention, timers fired through queen.timers_fire_v1 (a sealed timer's message
-- stored unmarked). Its sweepers keep calling it during a rolling upgrade.
CREATE OR REPLACE FUNCTION queen.sweeper_pass_v1(
  p_since TIMESTAMPTZ, p_worker TEXT, p_shard_count INT, p_fire_limit INT, p_prune_limit INT, p_prune BOOLEAN)
RETURNS JSONB
LANGUAGE sql AS $$ SELECT queen.sweeper_pass_run_v1(p_since, p_worker, p_shard_count, p_fire_limit, p_prune_limit, p_prune, false, 0, 0) $$;

-- The pass since the log's retention, encrypted timers and the sweeper's traces (this release's
-- sweepers, shared/sql/sweeper.ts).
CREATE OR REPLACE FUNCTION queen.sweeper_pass_v4(
  p_since TIMESTAMPTZ, p_worker TEXT, p_shard_count INT, p_fire_limit INT, p_prune_limit INT, p_prune BOOLEAN,
  p_retention_default INT, p_links INT)
RETURNS JSONB
LANGUAGE sql AS $$
  SELECT queen.sweeper_pass_run_v1(p_since, p_worker, p_shard_count, p_fire_limit, p_prune_limit, p_prune,
    true, p_retention_default, p_links)
$$;

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
