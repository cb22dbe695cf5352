-- 064: a pop answers its messages as JSON text, beside the partition, lease and queue at the top of
-- Queen's answer and every partition leased with its lease (queen.log_pop_answer), rather than as
-- a jsonb array the API wrote out as text and read its top from: building jsonb took each payload
-- apart twice and put it together again. The pop's bodies change their result type, so the bodies
-- that answered jsonb go; no release had them (0.1.0 pops through queen.log_pop_v1 and
-- queen.log_pop_many_v1, which stay and call the new bodies). Each step is skipped where it is
-- done: the arguments are the same, so dropping by them alone would drop a new body on a second
-- apply.
DO $$
BEGIN
  IF to_regtype('queen.log_pop_answer') IS NULL THEN
    CREATE TYPE queen.log_pop_answer AS (messages TEXT, partition TEXT, partition_id UUID, lease_id UUID, queue TEXT,
                                         leases UUID[], partition_ids UUID[]);
  END IF;
  IF (SELECT prorettype FROM pg_proc
       WHERE oid = to_regprocedure('queen.log_pop_of_v1(boolean, uuid, text, text, text, integer, integer)')) = 'jsonb'::regtype THEN
    DROP FUNCTION queen.log_pop_of_v1(BOOLEAN, UUID, TEXT, TEXT, TEXT, INT, INT);
  END IF;
  IF (SELECT prorettype FROM pg_proc
       WHERE oid = to_regprocedure('queen.log_pop_many_of_v1(boolean, uuid, text, text, text, integer, integer)')) = 'jsonb'::regtype THEN
    DROP FUNCTION queen.log_pop_many_of_v1(BOOLEAN, UUID, TEXT, TEXT, TEXT, INT, INT);
  END IF;
END $$;
