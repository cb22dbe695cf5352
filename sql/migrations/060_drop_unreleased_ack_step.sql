-- 060: an ack step no release calls goes. Release 0.1.0 never had queen.log_ack_step_v1: its acks go
-- through queen.log_ack_one_v1, which stays. The builds since 059 defined the step for the ack batch;
-- its body is now queen.log_ack_step_of_v1, shared with 0.1.0's single ack, and the family file no
-- longer defines it. A database at 0.1.0, and a new one, has none of it, hence IF EXISTS.
DROP FUNCTION IF EXISTS queen.log_ack_step_v1(UUID, JSONB, INT, BOOLEAN, queen.partition_consumers);
