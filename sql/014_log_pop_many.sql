-- 014: pop from several partitions at once (Queen's `partitions`), under one shared lease id.

-- GET /api/v1/pop with Queen's `partitions` (p_partitions, 1 to 1000): leases up to that many
-- partitions to one consumer of the group, `p_batch` messages in all, each partition as
-- queen.log_pop_v1 leases one (a partition it has just leased holds a live lease, so the next turn
-- takes another). With more than one partition, every message carries one shared lease id
-- (queen.shared_leases) that acks and lease extends accept for each partition's own lease. A named
-- partition is one partition whatever p_partitions says.
CREATE OR REPLACE FUNCTION queen.log_pop_many_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, p_group TEXT, p_batch INT, p_partitions INT) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_group TEXT := coalesce(p_group, '__QUEUE_MODE__');
  v_out JSONB;
  v_got JSONB;
  v_left INT := p_batch;
  v_shared UUID;
BEGIN
  IF p_partitions IS NULL OR p_partitions < 1 OR p_partitions > 1000 THEN
    PERFORM queen.fail_v1('log_invalid_partitions', 'partitions is a whole number from 1 to 1000.', NULL);
  END IF;
  v_out := queen.log_pop_v1(p_tenant, p_queue, p_partition, p_group, p_batch);
  IF p_partitions = 1 OR p_partition IS NOT NULL OR jsonb_array_length(v_out) = 0 THEN RETURN v_out; END IF;
  -- At most min(p_partitions, p_batch) turns: each that goes on leased at least one message.
  v_left := p_batch - jsonb_array_length(v_out);
  FOR v_turn IN 2..p_partitions LOOP
    EXIT WHEN v_left <= 0;
    v_got := queen.log_pop_v1(p_tenant, p_queue, NULL, p_group, v_left);
    EXIT WHEN jsonb_array_length(v_got) = 0;
    v_out := v_out || v_got;
    v_left := v_left - jsonb_array_length(v_got);
  END LOOP;
  IF (SELECT count(DISTINCT e->>'leaseId') FROM jsonb_array_elements(v_out) e) = 1 THEN RETURN v_out; END IF;
  v_shared := gen_random_uuid();
  INSERT INTO queen.shared_leases AS s (partition_id, consumer_group, shared_id, lease_id)
  SELECT DISTINCT (e->>'partitionId')::uuid, v_group, v_shared, (e->>'leaseId')::uuid FROM jsonb_array_elements(v_out) e
  ON CONFLICT (partition_id, consumer_group) DO UPDATE SET shared_id = EXCLUDED.shared_id, lease_id = EXCLUDED.lease_id;
  RETURN (SELECT jsonb_agg(e || jsonb_build_object('leaseId', v_shared) ORDER BY k)
            FROM jsonb_array_elements(v_out) WITH ORDINALITY AS t (e, k));
END $$;
