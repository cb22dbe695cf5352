-- 048: the message log's retention options, per queue (docs/log-and-transactions.md, "Retention").
-- The rules are in sql/functions/retention.sql: the sweeper removes, through its shard claims, the
-- oldest messages of each partition that these options (or the cell's default retention) say are
-- past keeping. A table of its own beside queen.queues, so no boot alters an existing table (the
-- same reason as queen.queue_delays); a row only for a queue configured with one of the options.
-- Queues without a row fall under the cell's default (QUEEN_LOG_RETENTION_SECONDS), which is what
-- a database from before this release gets for its existing queues (docs/deploy.md, upgrade notes).
CREATE TABLE IF NOT EXISTS queen.queue_retention (
  queue_id                    UUID PRIMARY KEY REFERENCES queen.queues (id) ON DELETE CASCADE,
  -- Seconds after which a message is removed, consumed or not; 0: the cell's default.
  retention_seconds           INTEGER NOT NULL DEFAULT 0 CHECK (retention_seconds BETWEEN 0 AND 315360000),
  -- Seconds after which a message every consumer group has finished is removed; 0: not set.
  completed_retention_seconds INTEGER NOT NULL DEFAULT 0 CHECK (completed_retention_seconds BETWEEN 0 AND 315360000),
  -- false: the queue keeps its messages forever (retentionSeconds, completedRetentionSeconds and the
  -- cell's default do not apply; ttl and maxWaitTimeSeconds still do). NULL: never said, which is on.
  retention_enabled           BOOLEAN,
  -- Seconds after which a message some consumer group has not finished (or that no group has seen)
  -- is removed unconsumed; 0: not set.
  max_wait_time_seconds       INTEGER NOT NULL DEFAULT 0 CHECK (max_wait_time_seconds BETWEEN 0 AND 315360000),
  -- A message's lifetime: removed this many seconds after its push whatever else says; 0: not set.
  ttl                         INTEGER NOT NULL DEFAULT 0 CHECK (ttl BETWEEN 0 AND 315360000),
  updated_at                  TIMESTAMPTZ NOT NULL DEFAULT now()
);
