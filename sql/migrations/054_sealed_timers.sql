-- 054: which timers hold a sealed payload (scheduled into a queue with encryptionEnabled): their
-- payload is the sealed text the API wrote (AES-256-GCM, docs/security.md), never the plaintext. A
-- row per such timer, gone with it (fired, cancelled, or its tenant's timers deleted): the fire marks
-- the message it stores from such a timer in queen.sealed_messages, and peek and list mark the timer,
-- so the API opens it. The sweeper never needs the key: it copies the sealed text as it is.
--
-- The foreign key takes a SHARE ROW EXCLUSIVE lock on queen.log_timers (schedules, cancels and fires
-- wait; peeks and lists go on) for the moment the table is created; this migration is its own
-- transaction, so it is held no longer than that. A lock request queues the traffic behind it while
-- it waits, so each attempt waits at most 200 ms (lock_timeout) and a refused attempt is retried
-- after a 100 ms pause that lets the queued traffic through, up to 50 times (about 15 s); then the
-- boot fails, saying so, and nothing has changed.
DO $$
DECLARE
  v_attempt INT := 0;
  v_lock_timeout TEXT := current_setting('lock_timeout');
BEGIN
  IF to_regclass('queen.sealed_timers') IS NOT NULL THEN
    RETURN;
  END IF;
  LOOP
    BEGIN
      PERFORM set_config('lock_timeout', '200ms', true);
      CREATE TABLE queen.sealed_timers (
        timer_id UUID PRIMARY KEY REFERENCES queen.log_timers (timer_id) ON DELETE CASCADE
      );
      EXIT;
    EXCEPTION WHEN lock_not_available THEN
      v_attempt := v_attempt + 1;
      IF v_attempt >= 50 THEN
        RAISE EXCEPTION 'queen.sealed_timers references queen.log_timers, created under a brief SHARE ROW EXCLUSIVE lock on it, and 50 attempts of 200 ms each found it held; boot again when the transactions holding queen.log_timers have ended';
      END IF;
    END;
    PERFORM pg_sleep(0.1);
  END LOOP;
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
END $$;
