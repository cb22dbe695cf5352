-- 052: the trace events consumers record against a message (Queen's POST /api/v1/traces, which
-- its client's message.trace() calls). Bounded: at most queen.log_traces_per_message_v1()
-- per message, each data at most queen.log_trace_max_bytes_v1(); gone with the message
-- (ON DELETE CASCADE), so retention of messages is retention of their traces.
CREATE TABLE IF NOT EXISTS queen.message_traces (
  partition_id   UUID NOT NULL,
  transaction_id TEXT COLLATE "C" NOT NULL,
  n              INTEGER NOT NULL,
  consumer_group TEXT COLLATE "C" NOT NULL,
  event_type     TEXT COLLATE "C" NOT NULL,
  trace_names    TEXT[] NOT NULL DEFAULT '{}',
  data           JSONB,
  created_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (partition_id, transaction_id, n),
  FOREIGN KEY (partition_id, transaction_id) REFERENCES queen.messages (partition_id, transaction_id) ON DELETE CASCADE
);
