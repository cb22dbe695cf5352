-- 063: an ack batch's acks are judged and normalized in one statement (queen.log_check_acks_v1 with
-- the body's group beside the acks) instead of a PL/pgSQL call an ack, and a body's consumerGroup
-- is passed to it rather than written into each ack first. The bodies this replaces came after
-- 0.1.0 (0.1.0 acks through queen.log_ack_batch_v1 and queen.log_ack_batch_body_v1, which stay and
-- call the new ones), so no release had them, hence IF EXISTS.
DROP FUNCTION IF EXISTS queen.log_ack_batch_of_v1(BOOLEAN, UUID, JSONB, BOOLEAN);
DROP FUNCTION IF EXISTS queen.log_check_acks_v1(JSONB);
DROP FUNCTION IF EXISTS queen.log_body_acks_v1(JSONB);
