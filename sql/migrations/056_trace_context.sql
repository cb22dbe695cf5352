-- 056: the trace context a message carries (docs/tracing.md, "How context travels"): the trace a
-- push came from, answered by every pop (Queen's `traceId`, and a W3C `traceparent` when the span is
-- known), and the trace a timer was scheduled from, which the message it becomes on fire carries.
--   trace_id  the trace: Queen's traceId as the producer gave it, else the pushing request's sampled
--             span's trace id (a W3C trace id is 16 bytes, a UUID too: the same bits, written
--             4bf92f35-77b3-4da6-a3ce-929d0e0e4736 here and 4bf92f3577b34da6a3ce929d0e0e4736 there).
--   span_id   the 8-byte span id of that request's span (NULL for a traceId given without one).
-- Nullable, without a default: adding them is a change to the catalog only, no table rewrite and no
-- scan, whatever the size of queen.messages; a message pushed without trace context stores NULLs,
-- which cost a bit of the null bitmap. The previous release's functions name their columns on
-- insert, so they go on storing NULL during a rolling upgrade.
ALTER TABLE queen.messages ADD COLUMN trace_id UUID, ADD COLUMN span_id BYTEA;
ALTER TABLE queen.log_timers ADD COLUMN trace_id UUID, ADD COLUMN span_id BYTEA;
