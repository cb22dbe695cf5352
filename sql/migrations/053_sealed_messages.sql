-- 053: which messages are stored encrypted (a queue with encryptionEnabled): their payload is the
-- sealed text the API wrote (AES-256-GCM, docs/security.md), never the plaintext. A row per such
-- message, gone with it; the pop and the dead-letter read mark those messages so the API opens them.
CREATE TABLE IF NOT EXISTS queen.sealed_messages (
  partition_id UUID NOT NULL,
  seq          BIGINT NOT NULL,
  PRIMARY KEY (partition_id, seq),
  FOREIGN KEY (partition_id, seq) REFERENCES queen.messages (partition_id, seq) ON DELETE CASCADE
);
