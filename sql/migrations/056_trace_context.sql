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
--
-- The lock: ACCESS EXCLUSIVE on each table for the ALTER, held to this file's commit (its own
-- transaction: milliseconds). A lock request queues every push, pop and fire behind it while it
-- waits for the transactions already holding the table, so, as 010 does for queen.queues, each
-- attempt waits at most 200 ms (lock_timeout) and a refused one is retried after a 100 ms pause
-- that lets the queued traffic through, up to 50 times (about 15 s); then the boot fails, saying
-- so, and nothing has changed. Behind a catalog check, so a table that has its columns is never
-- locked (a schema apply run again beside live traffic, test/log/log.test.ts).
DO $$
DECLARE
  v_attempt INT;
  v_table TEXT;
  v_lock_timeout TEXT := current_setting('lock_timeout');
BEGIN
  FOREACH v_table IN ARRAY ARRAY['queen.messages', 'queen.log_timers'] LOOP
    CONTINUE WHEN EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = v_table::regclass AND attname = 'trace_id' AND NOT attisdropped);
    v_attempt := 0;
    LOOP
      BEGIN
        PERFORM set_config('lock_timeout', '200ms', true);
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS trace_id UUID, ADD COLUMN IF NOT EXISTS span_id BYTEA', v_table);
        EXIT;
      EXCEPTION WHEN lock_not_available THEN
        v_attempt := v_attempt + 1;
        IF v_attempt >= 50 THEN
          RAISE EXCEPTION '% gains trace_id and span_id once, under a brief ACCESS EXCLUSIVE lock, and 50 attempts of 200 ms each found it held; boot again when the transactions holding it have ended', v_table;
        END IF;
      END;
      PERFORM pg_sleep(0.1);
    END LOOP;
    PERFORM set_config('lock_timeout', v_lock_timeout, true);
  END LOOP;
END $$;
