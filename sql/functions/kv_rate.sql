-- The cell's rate buckets, shared by every API process of the cell (services/api/rate/store.ts).
-- One row per (tenant, scope): scope 'tenant_reads' or 'tenant_writes' per tenant, and 'cell' under
-- tenant '' for the cell ceiling. A process never spends from here per request: its primary leases
-- tokens in chunks (a statement per batch of leases, not per call) and hands them to its workers.
-- UNLOGGED: a bucket is a few seconds of state; after a crash every bucket starts full, which is
-- what an idle bucket is anyway. No WAL, no replica traffic for it.

-- One batch of leases. p_asks: [{t: tenant, s: scope, need, want, give, rate, burst}]. Each bucket
-- is refilled (rate tokens a second up to burst), credited with `give` (unused tokens a process
-- returns), and then pays min(level, want) if it holds at least `need`, else nothing. Rows are taken
-- in (tenant, scope) order, the same in every process, so two batches never deadlock. Answers
-- [{i: index in p_asks, granted, level: what is left}] and the number of processes seen in 3 s;
-- the call is also this process's heartbeat.
CREATE OR REPLACE FUNCTION queen.kv_rate_lease_v1(p_process TEXT, p_asks JSONB) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  a RECORD;
  v_now TIMESTAMPTZ;
  v_level DOUBLE PRECISION;
  v_grant DOUBLE PRECISION;
  v_out JSONB := '[]'::jsonb;
  v_processes INT;
BEGIN
  INSERT INTO queen.kv_rate_process (process, seen_at) VALUES (p_process, clock_timestamp())
    ON CONFLICT (process) DO UPDATE SET seen_at = EXCLUDED.seen_at;
  FOR a IN
    SELECT e.ord - 1 AS i, e.x ->> 't' AS tenant, e.x ->> 's' AS scope,
           (e.x ->> 'need')::float8 AS need, (e.x ->> 'want')::float8 AS want, (e.x ->> 'give')::float8 AS give,
           (e.x ->> 'rate')::float8 AS rate, (e.x ->> 'burst')::float8 AS burst
      FROM jsonb_array_elements(p_asks) WITH ORDINALITY AS e(x, ord)
     ORDER BY e.x ->> 't' COLLATE "C", e.x ->> 's' COLLATE "C"
  LOOP
    v_now := clock_timestamp();
    INSERT INTO queen.kv_rate_bucket (tenant, scope, tokens, at) VALUES (a.tenant, a.scope, a.burst, v_now)
      ON CONFLICT (tenant, scope) DO NOTHING;
    SELECT least(a.burst, b.tokens + greatest(0, extract(epoch FROM v_now - b.at)) * a.rate + a.give)
      INTO v_level
      FROM queen.kv_rate_bucket b WHERE b.tenant = a.tenant AND b.scope = a.scope FOR UPDATE;
    v_grant := CASE WHEN a.need > 0 AND v_level >= a.need THEN least(v_level, a.want) ELSE 0 END;
    UPDATE queen.kv_rate_bucket SET tokens = v_level - v_grant, at = greatest(at, v_now)
     WHERE tenant = a.tenant AND scope = a.scope;
    v_out := v_out || jsonb_build_object('i', a.i, 'granted', v_grant, 'level', v_level - v_grant);
  END LOOP;
  SELECT count(*) INTO v_processes FROM queen.kv_rate_process WHERE seen_at > clock_timestamp() - interval '3 seconds';
  -- Now and then, forget what nobody uses: a bucket idle for an hour is full (for any burst an
  -- hour of its rate refills), and a process unseen for a minute is gone. Rows someone holds are skipped.
  IF random() < 0.01 THEN
    DELETE FROM queen.kv_rate_bucket WHERE ctid IN (
      SELECT ctid FROM queen.kv_rate_bucket WHERE at < clock_timestamp() - interval '1 hour' LIMIT 1000 FOR UPDATE SKIP LOCKED);
    DELETE FROM queen.kv_rate_process WHERE ctid IN (
      SELECT ctid FROM queen.kv_rate_process WHERE seen_at < clock_timestamp() - interval '1 minute' LIMIT 100 FOR UPDATE SKIP LOCKED);
  END IF;
  RETURN jsonb_build_object('grants', v_out, 'processes', v_processes);
END;
$$;
