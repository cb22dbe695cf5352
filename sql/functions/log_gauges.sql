-- The message log's gauges for operators, read by the sweeper on its slow cadence
-- (services/sweeper/sweeper.ts, every LOG_GAUGE_INTERVAL_MS), never on a request's path.
--
-- One statement answers four cell-wide figures (docs/operations.md, "What to watch"):
--  * backlog: messages not yet finished (completed, or set aside as dead letters) by a consumer
--    group, summed over every group of every queue. A group's backlog on a partition is what lies
--    past its cursor minus what it finished ahead of the cursor (done_seqs). A group that has a row
--    on some partitions of a queue owes the others from their first message (its next pop there
--    starts at the beginning). A queue no group has ever popped counts once, for queue mode, the
--    group a plain pop uses.
--  * maxGroupBacklog: the largest backlog of one (queue, group): one stuck consumer, or everybody.
--  * oldestUnconsumedSeconds: the age of the oldest such message, 0 when there is none. A group's
--    oldest unfinished message on a partition is the one right after its cursor (the cursor moves
--    past every finished message at once), so this is one primary-key probe per (partition, group)
--    that is behind, never a scan of the messages.
--  * deadLetters: (message, group) pairs set aside and still stored, counted up to 1,000,000 through
--    the partial index on dead letters.
-- No queue, group or tenant name leaves log_gauges_v1: labels named after them would grow with the
-- cell. queen.log_backlog_v1 is the same reading by (tenant, queue, group), for an operator at a
-- psql prompt (docs/runbook.md: SELECT * FROM queen.log_backlog_v1() ORDER BY backlog DESC LIMIT 10).
-- The cost is a pass over
-- queen.partition_consumers and queen.partitions (one row per partition and group) plus one probe
-- per (partition, group) that is behind, which is why the sweeper reads it every 15 s rather than
-- every second. Measured (2026-12-01, a shared 2-core machine at load 16, every partition of two
-- groups behind): 0.4 s at 10,000 partitions, 1.5 to 2.5 s at 40,000.

-- One row per (queue, consumer group) that has messages to finish: how many, and when the oldest
-- of them was pushed. A group with rows on some partitions of a queue owes the others from their
-- floor. The floor of a partition is 0 (every message from seq 1 is owed: queen.log_backlog_v1)
-- or, with p_retained, the seq before its first stored message (queen.log_backlog_v2): with a
-- floor of 0 each figure is v1's, since cursors and finished seqs are never below it. Inlined by
-- the planner into both, p_retained a constant there.
CREATE OR REPLACE FUNCTION queen.log_backlog_of_v1(p_retained BOOLEAN)
RETURNS TABLE (tenant_id UUID, queue TEXT, consumer_group TEXT, backlog BIGINT, oldest_at TIMESTAMPTZ)
LANGUAGE sql STABLE AS $$
  WITH groups AS (
    SELECT DISTINCT p.queue_id, c.consumer_group
      FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
    UNION ALL
    SELECT q.id, '__QUEUE_MODE__' COLLATE "C" FROM queen.queues q
     WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.partition_consumers c ON c.partition_id = p.id
                        WHERE p.queue_id = q.id)
  ), parts AS (
    SELECT p.id, p.queue_id, p.last_seq,
           CASE WHEN p_retained
                THEN coalesce((SELECT m0.seq - 1 FROM queen.messages m0 WHERE m0.partition_id = p.id ORDER BY m0.seq LIMIT 1), p.last_seq)
                ELSE 0 END AS floor
      FROM queen.partitions p
  )
  SELECT q.tenant_id, q.name::text, g.consumer_group::text,
         sum(p.last_seq - greatest(coalesce(c.cursor_seq, 0), p.floor)
             - coalesce((SELECT count(*) FROM unnest(c.done_seqs) d WHERE d > p.floor), 0))::bigint,
         min(m.created_at)
    FROM groups g
    JOIN queen.queues q ON q.id = g.queue_id
    JOIN parts p ON p.queue_id = g.queue_id
    LEFT JOIN queen.partition_consumers c ON c.partition_id = p.id AND c.consumer_group = g.consumer_group
    -- The group's oldest unfinished message on the partition: the one right after its cursor (or
    -- after the removed head).
    LEFT JOIN queen.messages m ON m.partition_id = p.id AND m.seq = greatest(coalesce(c.cursor_seq, 0), p.floor) + 1
   WHERE p.last_seq > greatest(coalesce(c.cursor_seq, 0), p.floor)
   GROUP BY q.id, q.tenant_id, q.name, g.consumer_group
$$;

-- Every message from seq 1 owed (0.1.0's reading).
CREATE OR REPLACE FUNCTION queen.log_backlog_v1()
RETURNS TABLE (tenant_id UUID, queue TEXT, consumer_group TEXT, backlog BIGINT, oldest_at TIMESTAMPTZ)
LANGUAGE sql STABLE AS $$ SELECT * FROM queen.log_backlog_of_v1(false) $$;
-- The gauges' answer from the sums over one backlog reading (queen.log_gauges_v1 reads
-- queen.log_backlog_v1, queen.log_gauges_v2 queen.log_backlog_v2), and the dead letters stored.
CREATE OR REPLACE FUNCTION queen.log_gauges_answer_v1(p_backlog NUMERIC, p_max_group BIGINT, p_oldest_at TIMESTAMPTZ)
RETURNS JSONB
LANGUAGE sql STABLE AS $$
  SELECT jsonb_build_object(
    'backlog', coalesce(p_backlog, 0),
    'maxGroupBacklog', coalesce(p_max_group, 0),
    'oldestUnconsumedSeconds', coalesce(extract(epoch FROM now() - p_oldest_at)::double precision, 0),
    'deadLetters', (SELECT count(*) FROM (SELECT 1 FROM queen.message_failures
                                           WHERE dead_lettered_at IS NOT NULL LIMIT 1000000) d))
$$;
CREATE OR REPLACE FUNCTION queen.log_gauges_v1() RETURNS JSONB
LANGUAGE sql STABLE AS $$ SELECT queen.log_gauges_answer_v1(sum(b.backlog), max(b.backlog), min(b.oldest_at)) FROM queen.log_backlog_v1() b $$;

-- As queen.log_backlog_v1, counting from each partition's first retained message: what retention
-- removed (sql/functions/retention.sql) is owed by nobody. The retention moves the cursors of the
-- groups that have a row on the partition; a group without one (queue mode never popped, or a
-- group that never popped this partition) would otherwise owe every removed message from seq 1 for
-- ever. One probe more per partition (its first message, by the primary key).
CREATE OR REPLACE FUNCTION queen.log_backlog_v2()
RETURNS TABLE (tenant_id UUID, queue TEXT, consumer_group TEXT, backlog BIGINT, oldest_at TIMESTAMPTZ)
LANGUAGE sql STABLE AS $$ SELECT * FROM queen.log_backlog_of_v1(true) $$;
-- As queen.log_gauges_v1, over queen.log_backlog_v2.
CREATE OR REPLACE FUNCTION queen.log_gauges_v2() RETURNS JSONB
LANGUAGE sql STABLE AS $$ SELECT queen.log_gauges_answer_v1(sum(b.backlog), max(b.backlog), min(b.oldest_at)) FROM queen.log_backlog_v2() b $$;
