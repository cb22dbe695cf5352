-- 054: which timers hold a sealed payload (scheduled into a queue with encryptionEnabled): their
-- payload is the sealed text the API wrote (AES-256-GCM, docs/security.md), never the plaintext. A
-- row per such timer: the fire marks the message it stores from such a timer in
-- queen.sealed_messages, and peek and list mark the timer, so the API opens it. The sweeper never
-- needs the key: it copies the sealed text as it is.
--
-- No foreign key to queen.log_timers, on purpose: its ON DELETE trigger would run for every timer a
-- fire deletes, sealed or not (bench:sealed-timers measured the fire of clear timers at about 0.7x
-- with it). The fire (queen.timers_fire_v3) and the cancel (queen.timers_apply_v2) delete a timer's
-- row here with the timer. A row whose timer the previous release fired or cancelled during a
-- rolling upgrade stays, naming a timer id that never comes back (ids are random UUIDs): it marks
-- nothing.
CREATE TABLE IF NOT EXISTS queen.sealed_timers (
  timer_id UUID PRIMARY KEY
);
