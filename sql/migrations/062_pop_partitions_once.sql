-- 062: the pop's body takes how many partitions to lease (queen.log_pop_of_v1 with p_partitions),
-- so a pop of several partitions reads its queue's candidates once instead of once a partition.
-- The body of six arguments that the builds after 0.1.0 defined goes; no release had it (0.1.0 pops
-- through queen.log_pop_v1 and queen.log_pop_many_v1, which stay and call the new body), hence
-- IF EXISTS.
DROP FUNCTION IF EXISTS queen.log_pop_of_v1(BOOLEAN, UUID, TEXT, TEXT, TEXT, INT);
