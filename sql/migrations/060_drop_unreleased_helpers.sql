-- 060: helpers no release calls go. Release 0.1.0 had neither, hence IF EXISTS (a new database has
-- none either); the builds since 059 defined them, and their family files no longer do:
-- queen.log_ack_step_v1, the ack batch's step, whose body is now queen.log_ack_step_of_v1 (shared
-- with 0.1.0's single ack, queen.log_ack_one_v1, which stays), and queen.operator_check_name_v1,
-- the operator functions' name refusal, now queen.check_name_v1 for every surface.
DROP FUNCTION IF EXISTS queen.log_ack_step_v1(UUID, JSONB, INT, BOOLEAN, queen.partition_consumers);
DROP FUNCTION IF EXISTS queen.operator_check_name_v1(TEXT, TEXT, TEXT);
