-- The message log's retention: which messages a queue keeps, and the bounded removal of the rest by
-- the sweeper, one claimed shard at a time (queen.sweeper_pass_v4, through its body
-- queen.sweeper_pass_run_v1, calls queen.log_retain_v1 for each shard it claimed). The options are queen.queue_retention's (written by queen.log_configure_v2);
-- docs/log-and-transactions.md ("Retention") states the rules in prose.
--
-- What is removed is always a prefix of a partition: its oldest messages in seq order, up to the
-- newest one that is past keeping. So a partition's messages stay contiguous, and what a consumer group
-- has not finished of a removed prefix is finished for it by moving its cursor past the prefix, in
-- the same transaction: a pop never finds a partition whose next message is gone.

-- The seconds after which a queue's messages go, from its queen.queue_retention row (NULL when it
-- has none) and the cell's default (QUEEN_LOG_RETENTION_SECONDS, 0 = none):
--  * any_s: any message, finished or not: the lesser of ttl and the retention (retentionSeconds, or
--    the cell's default when that is 0; neither when retentionEnabled is false);
--  * unfinished_s: a message some consumer group has not finished (or no group has seen): the
--    lesser of any_s and maxWaitTimeSeconds;
--  * finished_s: a message every consumer group has finished: the lesser of any_s and
--    completedRetentionSeconds (not when retentionEnabled is false).
-- NULL: no removal of that kind.
CREATE OR REPLACE FUNCTION queen.log_retention_ages_v1(
  p_ttl INT, p_retention INT, p_completed INT, p_enabled BOOLEAN, p_max_wait INT, p_default INT,
  OUT any_s INT, OUT unfinished_s INT, OUT finished_s INT
) LANGUAGE sql IMMUTABLE AS $$
  SELECT a, least(a, nullif(p_max_wait, 0)), least(a, CASE WHEN p_enabled IS DISTINCT FROM false THEN nullif(p_completed, 0) END)
  FROM (SELECT least(nullif(p_ttl, 0),
    CASE WHEN p_enabled IS DISTINCT FROM false THEN nullif(coalesce(nullif(p_retention, 0), p_default), 0) END) AS a) x
$$;

-- Whether a consumer group's row in a partition is stale: it holds nothing the group would
-- lose if the row went and the group came back (its next pop creates the row anew at cursor 0, and
-- the pop reads from the partition's first retained message). p_floor: every message up to it is
-- removed (the first retained message's seq - 1, or last_seq when the partition is empty). Stale when:
--  * the group finished nothing the partition still holds: its cursor is at or before p_floor and
--    nothing is finished ahead of it (done_seqs empty), so a group coming back re-reads nothing it
--    acked (it reads exactly what the row would have let it read);
--  * it holds no lease: none, or one that expired holding only removed messages (an expired lease
--    on retained messages still owes them their failed delivery, counted by the next pop);
--  * no retryDelay holds its partition back (queen.consumer_retry_at in the future);
--  * and the group has not leased from the partition (or since its row was made, when it never
--    did) since p_idle_before: the queue's age for an unfinished message (the lesser of
--    retentionSeconds or the cell's default, ttl and maxWaitTimeSeconds; completedRetentionSeconds
--    for a queue with only that). In an empty partition (p_empty) the age is not waited for: the
--    partition goes with its rows.
-- The counters of the row (deliveries, completed, failures, dead letters) go with it; failure rows
-- of retained messages stay (keyed by message and group), so a group that comes back keeps its
-- retry counts.
CREATE OR REPLACE FUNCTION queen.log_group_stale_v1(
  c queen.partition_consumers, p_floor BIGINT, p_empty BOOLEAN, p_idle_before TIMESTAMPTZ, p_now TIMESTAMPTZ
) RETURNS BOOLEAN LANGUAGE sql STABLE AS $$
  SELECT c.cursor_seq <= p_floor AND cardinality(c.done_seqs) = 0
     AND (c.lease_id IS NULL OR (c.lease_expires_at <= p_now AND NOT EXISTS (SELECT 1 FROM unnest(c.lease_seqs) s WHERE s > p_floor)))
     AND (p_empty OR coalesce(c.last_leased_at, c.created_at) < p_idle_before)
     AND NOT EXISTS (SELECT 1 FROM queen.consumer_retry_at t
                      WHERE t.partition_id = c.partition_id AND t.consumer_group = c.consumer_group AND t.retry_at > p_now)
$$;

-- One shard's retention: removes, at most p_limit messages in all, the prefix of each partition of
-- the shard (a partition's shard is the first 6 bits of its id: a range scan of the partitions'
-- primary key, no index of its own) that its queue's
-- retention says is past keeping, and moves the cursors of the groups that had not finished it.
-- Then, per partition it visits, the stale rows of consumer groups (queen.log_group_stale_v1) and
-- the partition itself when it holds no message and no group row is left; each removed row and
-- partition counts against p_limit as a message does.
-- Answers {removed, unfinished, bytes, groups, partitions, full, queues: [{tenant, queue, removed,
-- unfinished, bytes}]}: `groups` and `partitions` count the rows and partitions removed,
-- `unfinished` counts removed messages some group had not finished, `bytes` the payloads as stored,
-- `full` that the batch ran out with more to remove.
--
-- Who waits for whom. A partition with nothing to remove costs two index probes and no lock (its
-- first message, and whether a group's cursor is behind it). One with something to remove is taken
-- FOR UPDATE SKIP LOCKED: a push holding it (or a pop creating a group's row in it) makes this pass
-- skip it, never wait; while the pass holds it, a push to it waits for the pass to commit (one
-- pass: this batch, bounded by p_limit). FOR UPDATE, not a lesser lock, so no consumer group can
-- appear in the partition (its row's foreign key takes KEY SHARE) between the read of the groups and
-- the removal. The rows of the groups whose cursor is behind the prefix are taken FOR NO KEY UPDATE
-- SKIP LOCKED: a group being popped or acked right now is not waited for; the prefix stops at its
-- cursor instead. A group holding a live lease keeps its leased messages: the prefix stops before
-- the first of them (they go in the first pass after the lease ends, if still past keeping).
-- Pops and acks of groups past the prefix take nothing this takes, and wait for nothing. A stale
-- group row is taken FOR UPDATE SKIP LOCKED (one a pop, an ack or a lease extend holds stays this
-- pass); an empty partition goes only under the FOR UPDATE of its row. A push or a timer fire into
-- a partition being removed waits for the pass (its lock on the row: queen.log_lock_partition_v1,
-- or the fast path's statement) and then creates the partition anew: never lost. A pop or a
-- subscribe creating a group's row waits likewise and skips the partition that went (their
-- FOR KEY SHARE of it).
--
-- The cursor moves also repair a group that is behind a partition's first message without anything
-- to remove (a group first seen after an earlier removal): its cursor goes to just before the first
-- retained message, which the pop's delayedProcessing check (next message = cursor + 1) needs.
CREATE OR REPLACE FUNCTION queen.log_retain_v1(p_shard SMALLINT, p_limit INT, p_default_seconds INT) RETURNS JSONB
LANGUAGE plpgsql SET enable_bitmapscan = off SET plan_cache_mode = force_custom_plan AS $$
DECLARE
  r RECORD;
  g RECORD;
  v_now TIMESTAMPTZ := now();
  v_budget INT := p_limit;
  v_first BIGINT;
  v_first_at TIMESTAMPTZ;
  v_last BIGINT;
  v_floor BIGINT;
  v_minc BIGINT;
  v_walk BIGINT;
  v_upto BIGINT;
  v_cap BIGINT;
  v_target BIGINT;
  v_locked TEXT[];
  v_n INT;
  v_unf INT;
  v_bytes BIGINT;
  v_cursor BIGINT;
  v_done BIGINT[];
  v_per JSONB := '{}';
  v_key TEXT;
  v_removed INT := 0;
  v_unfinished INT := 0;
  v_total_bytes BIGINT := 0;
  v_idle_before TIMESTAMPTZ;
  v_empty BOOLEAN;
  v_g INT;
  v_groups INT := 0;
  v_partitions INT := 0;
  -- What the removed rows had counted (queen.log_totals_v1 keeps it): messages pushed (a removed
  -- partition's last_seq), and the completed and failed deliveries of removed group rows.
  v_gone_pushed BIGINT := 0;
  v_gone_completed BIGINT := 0;
  v_gone_failed BIGINT := 0;
  v_gc BIGINT;
  v_gf BIGINT;
  -- The shard's partitions: those whose id's first 6 bits are the shard number, a range of the
  -- partitions' primary key (ids are random, so the 64 ranges hold about as many partitions each).
  v_lo UUID := (lpad(to_hex(p_shard::int << 2), 2, '0') || '000000-0000-0000-0000-000000000000')::uuid;
  v_hi UUID := CASE WHEN p_shard < 63 THEN (lpad(to_hex((p_shard::int + 1) << 2), 2, '0') || '000000-0000-0000-0000-000000000000')::uuid END;
BEGIN
  FOR r IN
    SELECT s.* FROM (
      SELECT p.id, q.tenant_id, q.name AS queue, a.any_s, a.unfinished_s, a.finished_s
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
        LEFT JOIN queen.queue_retention t ON t.queue_id = q.id
        CROSS JOIN LATERAL queen.log_retention_ages_v1(t.ttl, t.retention_seconds, t.completed_retention_seconds,
          t.retention_enabled, t.max_wait_time_seconds, p_default_seconds) a
       WHERE p.id >= v_lo AND (v_hi IS NULL OR p.id < v_hi)) s
     WHERE coalesce(s.unfinished_s, s.finished_s) IS NOT NULL
     ORDER BY s.id
  LOOP
    EXIT WHEN v_budget <= 0;
    -- The cheap probes, no lock: the first message, and a group behind it.
    v_first := NULL;
    SELECT m.seq, m.created_at INTO v_first, v_first_at FROM queen.messages m
     WHERE m.partition_id = r.id ORDER BY m.seq LIMIT 1;
    IF v_first IS NULL THEN
      SELECT p.last_seq INTO v_floor FROM queen.partitions p WHERE p.id = r.id;
    ELSE
      v_floor := v_first - 1;
    END IF;
    -- A group's row unused since this instant may be stale (queen.log_group_stale_v1).
    v_idle_before := v_now - make_interval(secs => coalesce(r.unfinished_s, r.finished_s));
    CONTINUE WHEN (v_first IS NULL OR v_first_at >= v_now - make_interval(secs => least(r.unfinished_s, r.finished_s)))
      AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c WHERE c.partition_id = r.id
                       AND (c.cursor_seq < v_floor OR queen.log_group_stale_v1(c, v_floor, v_first IS NULL, v_idle_before, v_now)))
      -- An empty partition without groups: the partition itself goes.
      AND (v_first IS NOT NULL OR EXISTS (SELECT 1 FROM queen.partition_consumers c WHERE c.partition_id = r.id));

    PERFORM 1 FROM queen.partitions p WHERE p.id = r.id FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    -- Under the lock: nothing is added at the head, so the first message and the floor hold.
    SELECT m.seq INTO v_first FROM queen.messages m WHERE m.partition_id = r.id ORDER BY m.seq LIMIT 1;
    SELECT p.last_seq INTO v_last FROM queen.partitions p WHERE p.id = r.id;
    v_floor := coalesce(v_first - 1, v_last);
    SELECT min(c.cursor_seq) INTO v_minc FROM queen.partition_consumers c WHERE c.partition_id = r.id;

    -- The walk, over the first messages (at most the batch left): the newest that is past keeping
    -- by its own rule (finished by every group: finished_s; else unfinished_s). It goes with every
    -- older message of its partition: older, so no rule wanted them longer than it (a finished
    -- message kept for completedRetentionSeconds goes early when an unfinished newer one reached
    -- maxWaitTimeSeconds; an unfinished one never goes by finished_s, being newer than every
    -- finished one).
    v_walk := NULL;
    IF v_first IS NOT NULL THEN
      SELECT max(n.seq) INTO v_walk FROM (
        SELECT m.seq, m.created_at FROM queen.messages m WHERE m.partition_id = r.id AND m.seq >= v_first
         ORDER BY m.seq LIMIT v_budget) n
       WHERE CASE WHEN n.seq <= v_minc THEN n.created_at < v_now - make_interval(secs => r.finished_s)
                  ELSE n.created_at < v_now - make_interval(secs => r.unfinished_s) END;
    END IF;
    v_target := greatest(coalesce(v_walk, v_floor), v_floor);

    -- The groups behind the target, locked where free; the prefix stops at a busy group's cursor and
    -- before a live lease's first message.
    SELECT array_agg(x.consumer_group) INTO v_locked FROM (
      SELECT c.consumer_group FROM queen.partition_consumers c
       WHERE c.partition_id = r.id AND c.cursor_seq < v_target
       ORDER BY c.consumer_group FOR NO KEY UPDATE SKIP LOCKED) x;
    SELECT min(CASE WHEN c.consumer_group <> ALL (coalesce(v_locked, '{}')) THEN c.cursor_seq
                    WHEN c.lease_id IS NOT NULL AND c.lease_expires_at > clock_timestamp()
                      THEN (SELECT min(s) - 1 FROM unnest(c.lease_seqs) s WHERE s > c.cursor_seq) END)
      INTO v_cap FROM queen.partition_consumers c WHERE c.partition_id = r.id AND c.cursor_seq < v_target;
    -- (least() skips a NULL: nothing walked is nothing to remove, whatever the cap.)
    v_upto := CASE WHEN v_walk IS NOT NULL THEN least(v_walk, v_cap) END;

    v_n := 0;
    IF v_upto IS NOT NULL AND v_upto >= v_first THEN
      WITH d AS (
        DELETE FROM queen.messages m WHERE m.partition_id = r.id AND m.seq >= v_first AND m.seq <= v_upto
        RETURNING m.seq, pg_column_size(m.payload) AS b)
      SELECT count(*)::int, count(*) FILTER (WHERE v_minc IS NULL OR d.seq > v_minc)::int, coalesce(sum(d.b), 0)
        INTO v_n, v_unf, v_bytes FROM d;
      v_budget := v_budget - v_n;
      v_removed := v_removed + v_n;
      v_unfinished := v_unfinished + v_unf;
      v_total_bytes := v_total_bytes + v_bytes;
      v_key := r.tenant_id::text || '/' || r.queue;
      v_per := jsonb_set(v_per, ARRAY[v_key], jsonb_build_object('tenant', r.tenant_id, 'queue', r.queue,
        'removed', coalesce((v_per #>> ARRAY[v_key, 'removed'])::int, 0) + v_n,
        'unfinished', coalesce((v_per #>> ARRAY[v_key, 'unfinished'])::int, 0) + v_unf,
        'bytes', coalesce((v_per #>> ARRAY[v_key, 'bytes'])::bigint, 0) + v_bytes));
      v_floor := greatest(v_floor, v_upto);
    END IF;

    -- Every locked group behind the new floor finishes what is gone: its cursor moves to the floor,
    -- and what it had finished ahead of it folds in.
    FOR g IN
      SELECT c.consumer_group, c.cursor_seq, c.done_seqs FROM queen.partition_consumers c
       WHERE c.partition_id = r.id AND c.consumer_group = ANY (coalesce(v_locked, '{}')) AND c.cursor_seq < v_floor
    LOOP
      v_cursor := v_floor;
      v_done := ARRAY(SELECT s FROM unnest(g.done_seqs) s WHERE s > v_floor ORDER BY s);
      WHILE v_cursor + 1 = ANY (v_done) LOOP
        v_cursor := v_cursor + 1;
        v_done := array_remove(v_done, v_cursor);
      END LOOP;
      UPDATE queen.partition_consumers SET cursor_seq = v_cursor, done_seqs = v_done, updated_at = v_now
       WHERE partition_id = r.id AND consumer_group = g.consumer_group;
    END LOOP;

    -- The stale rows of groups (queen.log_group_stale_v1), at most the batch left, each taken
    -- FOR UPDATE SKIP LOCKED and judged again on the version it locked: a row a pop, an ack or a
    -- lease extend holds right now is not waited for and stays this pass. Still under the
    -- partition's lock, so no group's row can be created meanwhile (its foreign key's KEY SHARE).
    EXIT WHEN v_budget <= 0;
    v_empty := NOT EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = r.id);
    WITH gone AS (
      DELETE FROM queen.partition_consumers d USING (
        SELECT c.consumer_group FROM queen.partition_consumers c
         WHERE c.partition_id = r.id AND queen.log_group_stale_v1(c, v_floor, v_empty, v_idle_before, clock_timestamp())
         ORDER BY c.consumer_group LIMIT v_budget
         FOR UPDATE OF c SKIP LOCKED) s
       WHERE d.partition_id = r.id AND d.consumer_group = s.consumer_group
      RETURNING d.consumer_group, d.completed, d.failures
    ), forgotten AS (
      -- The queue forgets each such group: a pop of it registers it again and reads this partition
      -- from its first message, as a group seen for the first time does (queen.log_register_group_v1).
      DELETE FROM queen.consumer_groups k USING queen.partitions p
       WHERE p.id = r.id AND k.queue_id = p.queue_id AND k.consumer_group IN (SELECT gone.consumer_group FROM gone))
    SELECT count(*)::int, coalesce(sum(gone.completed), 0), coalesce(sum(gone.failures), 0) INTO v_g, v_gc, v_gf FROM gone;
    v_groups := v_groups + v_g;
    v_gone_completed := v_gone_completed + v_gc;
    v_gone_failed := v_gone_failed + v_gf;
    v_budget := v_budget - v_g;
    -- An empty partition with no group row left goes, with what hangs on it (ON DELETE
    -- CASCADE: nothing but the rows just removed). No message can arrive meanwhile: a push needs
    -- the row's lock (FOR NO KEY UPDATE, queen.log_ensure_partition_v1 and the fast path's), which
    -- waits behind this pass's FOR UPDATE, finds the row gone and creates the partition anew.
    IF v_empty AND v_budget > 0 AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c WHERE c.partition_id = r.id) THEN
      DELETE FROM queen.partitions p WHERE p.id = r.id RETURNING p.last_seq INTO v_last;
      v_gone_pushed := v_gone_pushed + v_last;
      v_partitions := v_partitions + 1;
      v_budget := v_budget - 1;
    END IF;
  END LOOP;
  -- One row per shard, which this pass holds the claim of: sweepers never wait on each other here.
  IF v_groups > 0 OR v_partitions > 0 THEN
    INSERT INTO queen.system_state AS s (key, value, updated_at)
    VALUES ('log_removed_rows:' || p_shard, jsonb_build_object('pushed', v_gone_pushed, 'completed', v_gone_completed, 'failed', v_gone_failed), now())
    ON CONFLICT (key) DO UPDATE SET updated_at = now(), value = jsonb_build_object(
      'pushed', (s.value ->> 'pushed')::bigint + v_gone_pushed,
      'completed', (s.value ->> 'completed')::bigint + v_gone_completed,
      'failed', (s.value ->> 'failed')::bigint + v_gone_failed);
  END IF;
  RETURN jsonb_build_object('removed', v_removed, 'unfinished', v_unfinished, 'bytes', v_total_bytes,
    'groups', v_groups, 'partitions', v_partitions, 'full', v_budget <= 0,
    'queues', coalesce((SELECT jsonb_agg(e.value ORDER BY e.key) FROM jsonb_each(v_per) e), '[]'::jsonb));
END $$;

-- The log's counters since the cell began, summed: messages pushed (every partition's last_seq), and
-- the completed and failed deliveries of every consumer group (the partition_consumers counters),
-- with what the rows and partitions retention removed had counted (queen.system_state
-- 'log_removed_rows:<shard>', written by queen.log_retain_v1), so a removal never lowers them. A
-- queue's delete and a consumer group's delete still do. One pass over both tables: for a reading
-- every few seconds, not for every request.
CREATE OR REPLACE FUNCTION queen.log_totals_v1() RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'pushed', (SELECT coalesce(sum(p.last_seq), 0) FROM queen.partitions p) + coalesce(sum((g.value ->> 'pushed')::bigint), 0),
    'completed', (SELECT coalesce(sum(c.completed), 0) FROM queen.partition_consumers c) + coalesce(sum((g.value ->> 'completed')::bigint), 0),
    'failed', (SELECT coalesce(sum(c.failures), 0) FROM queen.partition_consumers c) + coalesce(sum((g.value ->> 'failed')::bigint), 0))
  FROM queen.system_state g WHERE g.key LIKE 'log_removed_rows:%'
$$;

-- What the retention gauges show (read on the log gauges' cadence): the age of the cell's oldest
-- retained message (one probe of each partition's first message, by its primary key, rather than a
-- scan of the log) and the size on disk of the log's tables with their indexes and TOAST.
CREATE OR REPLACE FUNCTION queen.log_retention_gauges_v1() RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'oldestMessageSeconds', coalesce(extract(epoch FROM now() - (
        SELECT min(o.created_at) FROM queen.partitions p,
          LATERAL (SELECT m.created_at FROM queen.messages m WHERE m.partition_id = p.id ORDER BY m.seq LIMIT 1) o
      ))::double precision, 0),
    'tables', jsonb_build_object(
      'messages', pg_total_relation_size('queen.messages'),
      'message_failures', pg_total_relation_size('queen.message_failures'),
      'message_failure_texts', pg_total_relation_size('queen.message_failure_texts'),
      'partition_consumers', pg_total_relation_size('queen.partition_consumers'),
      'partitions', pg_total_relation_size('queen.partitions')))
$$;
