-- The usage rollup, incremental. A count of every live key and pending timer in one statement
-- grows with the cell (its first version took 0.7-3.4 s at a million keys and 9-18 s at ten
-- million, bench:scale 2026-12-01). queen.kv_usage_rollup_v2 counts one bounded
-- slice per call, a fixed number of heap pages of queen.kv or queen.log_timers read by a TID range
-- scan, keeps each slice's count per tenant, and publishes their sum into queen.kv_usage: same
-- columns, same meaning, so no reader changes. A write-path counter stays rejected (a per-tenant row
-- every write locks would let one writer of a tenant through at a time).
--
-- The layout, per relation ('kv' or 'timers'): slice s is the heap pages [s * pages, (s + 1) * pages).
-- kv_usage_layout says how many slices cover the relation, in which physical file (filenode) and
-- since when (cover_at, below); kv_usage_slice says when each slice was last counted; kv_usage_part
-- holds each slice's count per tenant (for 'timers', rows and bytes are timers and timer bytes),
-- kv_usage_recent the part of it written lately (below);
-- kv_usage_total holds their sum per tenant, kept by adding each recounted slice's difference, so a
-- call reads the tenants, not every tenant's part in every slice (10,000 tenants in 134 slices would
-- be 1.3 million parts a call). Only this function writes these five tables; DELETE FROM
-- queen.kv_usage_layout clears all of them at the next call and counts the cell again.
--
-- What computed_at means, and why a worker's local delta stays right (docs/limits.md). A worker
-- retires a write of its own once the write's commit was acknowledged before computed_at; that is
-- only correct if every such commit is in the counts. Here the counts were taken at different
-- times, so computed_at is the OLDEST instant any part of the sum speaks for:
--   computed_at = min(every slice's counted_at, every layout's cover_at)
-- and a commit acknowledged before it is in the sum:
--  * counted_at is now() of the transaction that counted the slice, its start, never later than the
--    snapshot of the count statement; a commit acknowledged before it is visible to that count. A
--    commit acknowledged before computed_at came before every slice's counted_at, so every slice's
--    count saw the table after it: its inserted row is counted in whichever slice holds it, its
--    deleted row in none.
--  * a row must also lie in a slice. cover_at is an instant at which the relation had no more pages
--    than its slices cover (read before the relation's size, under a lock that stops a rewrite); a
--    tuple on a page past them was written after cover_at, so after computed_at, and is no concern
--    of a retired write. When the relation has grown past its slices, the new slices are created
--    as counted at the previous cover_at with nothing in them: at that instant they had no pages, so
--    a count then would have found nothing, which is the truth the rule needs.
--  * a rewrite (VACUUM FULL, CLUSTER, TRUNCATE) gives the relation a new filenode and moves every
--    row: the slices are rebuilt uncounted, and nothing is published until each has been counted in
--    the new file; queen.kv_usage keeps the last measurement (still true for its own computed_at).
-- The other side: a write acknowledged after computed_at is still in its worker's delta, so the sum
-- must not count it too, or the estimate counts it twice for up to a whole refresh (a slice counted
-- a second ago holds every row inserted in it up to then, and computed_at is about an interval old:
-- measured, four writers against max_rows 60 were blocked at 54). Every row keeps its created_at,
-- the clock of the transaction that inserted it (now() or clock_timestamp() inside it: never later
-- than its commit). A slice's count also notes, per tenant and millisecond, its rows created after
-- the oldest counted_at at that moment (no later computed_at is older than that), and a publish
-- leaves out those whose millisecond starts after its computed_at: their commits, and so their
-- acknowledgements, came after it. An update never changes created_at (a row created anew over an
-- expired one takes a new one), so an existing row stays counted. What is counted twice is what v1
-- counted twice: a write that began before computed_at and committed after it.
-- The error that remains is the one any slice-by-slice count has: a row an update moves from one
-- slice to another between their counts is counted twice or not at all (an update that stays on
-- its page, which fillfactor 70 makes nearly every one, stays in its slice). That update committed
-- after computed_at, so a worker that made it still holds it in its local delta; the error lasts
-- until the next refresh counts both slices. Quotas are soft already (docs/limits.md).
--
-- Several sweepers call it. A transaction-scoped advisory lock lets one call work at a time in the
-- cell; the others answer busy at once and wait for nothing. So two never count a slice at once
-- and no two sums are written from interleaved parts. The count and the sum are read inside the
-- lock, so each published sum is the parts as they stood at that moment.

-- Adds p_sign times some parts of one relation to queen.kv_usage_total (the parts of a recounted
-- slice: -1 for its old count, +1 for its new one), one row per tenant, in tenant order.
CREATE OR REPLACE FUNCTION queen.kv_usage_total_add_v1(p_rel TEXT, p_sign INT, p_tenants UUID[], p_rows BIGINT[], p_bytes BIGINT[])
RETURNS VOID
LANGUAGE sql AS $$
  INSERT INTO queen.kv_usage_total AS t (tenant_id, rows, bytes, timers, timer_bytes)
  SELECT d.tenant_id,
         CASE WHEN p_rel = 'kv' THEN p_sign * d.r ELSE 0 END, CASE WHEN p_rel = 'kv' THEN p_sign * d.b ELSE 0 END,
         CASE WHEN p_rel = 'timers' THEN p_sign * d.r ELSE 0 END, CASE WHEN p_rel = 'timers' THEN p_sign * d.b ELSE 0 END
  FROM (SELECT u.tenant_id, sum(u.r)::bigint AS r, sum(u.b)::bigint AS b
        FROM unnest(p_tenants, p_rows, p_bytes) AS u(tenant_id, r, b) GROUP BY u.tenant_id) d
  ORDER BY d.tenant_id
  ON CONFLICT (tenant_id) DO UPDATE
    SET rows = t.rows + EXCLUDED.rows, bytes = t.bytes + EXCLUDED.bytes,
        timers = t.timers + EXCLUDED.timers, timer_bytes = t.timer_bytes + EXCLUDED.timer_bytes
$$;

-- One call: bring each relation's layout up to date, count the slice counted longest ago (if it is
-- older than half of p_interval, so that several sweepers calling on the same cadence do not count
-- the cell more than twice an interval; a slice never counted is always due), move its difference
-- into kv_usage_total, then publish the totals (unless a slice is still uncounted). A tenant whose numbers did not change is stamped again only once its computed_at has fallen
-- p_interval / 8 behind (an older computed_at is always safe: it retires fewer writes), so a cell
-- of many idle tenants does not rewrite every kv_usage row on every slice. A tenant with nothing
-- left in any slice is written as zeros. The bytes are v1's: key, namespace and stored value sizes
-- of live keys (expired ones are invisible, as in v1: each slice judges expiry at its own now());
-- timers and their payload sizes.
-- Answers: busy (another call holds the lock: nothing done), counted (a slice was counted), rel and
-- slice, slices (in all), uncounted (slices never counted in their layout; while any remains nothing
-- is published: the caller counts on without pause), published, tenants (kv_usage rows written),
-- computedAt, seconds.
CREATE OR REPLACE FUNCTION queen.kv_usage_rollup_v2(p_pages INT, p_interval INTERVAL) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_started TIMESTAMPTZ := clock_timestamp();
  v_rel TEXT;
  v_relid REGCLASS;
  v_seen_at TIMESTAMPTZ;
  v_blocks BIGINT;
  v_filenode OID;
  l queen.kv_usage_layout;
  v_n INT;
  v_slice INT;
  v_pages INT;
  v_lo TID;
  v_hi TID;
  v_parts INT := 0;
  v_total INT;
  v_uncounted INT;
  v_at TIMESTAMPTZ;
  v_written INT;
  v_t UUID[];
  v_r BIGINT[];
  v_b BIGINT[];
  v_since TIMESTAMPTZ;
  v_rt UUID[];
  v_rc TIMESTAMPTZ[];
  v_rr BIGINT[];
  v_rb BIGINT[];
BEGIN
  IF p_pages IS NULL OR p_pages < 1 THEN
    RAISE EXCEPTION 'kv_usage_rollup_v2: p_pages must be at least 1, got %', p_pages;
  END IF;
  -- 'QKVU': one roller at a time in the cell, until this transaction ends.
  IF NOT pg_try_advisory_xact_lock(1363891797) THEN
    RETURN jsonb_build_object('busy', true, 'counted', false, 'published', false);
  END IF;
  IF NOT EXISTS (SELECT 1 FROM queen.kv_usage_layout) THEN
    -- The first call in a cell, or an operator's reset: nothing left over is trusted.
    DELETE FROM queen.kv_usage_part;
    DELETE FROM queen.kv_usage_recent;
    DELETE FROM queen.kv_usage_slice;
    DELETE FROM queen.kv_usage_total;
  END IF;

  FOR v_rel, v_relid IN SELECT r.rel, r.relid FROM (VALUES ('kv', 'queen.kv'::regclass), ('timers', 'queen.log_timers'::regclass)) AS r(rel, relid) LOOP
    -- ACCESS SHARE, the lock every read takes (no write waits on it), held to the end: the relation
    -- cannot be rewritten or truncated between its size read here and the count below.
    IF v_rel = 'kv' THEN
      LOCK TABLE queen.kv IN ACCESS SHARE MODE;
    ELSE
      LOCK TABLE queen.log_timers IN ACCESS SHARE MODE;
    END IF;
    -- Read before the size: the size only grows while the lock is held, so at v_seen_at the relation
    -- had at most v_blocks pages.
    v_seen_at := clock_timestamp();
    v_blocks := pg_relation_size(v_relid) / current_setting('block_size')::int;
    v_filenode := pg_relation_filenode(v_relid);
    SELECT * INTO l FROM queen.kv_usage_layout x WHERE x.rel = v_rel;
    IF NOT FOUND OR l.filenode <> v_filenode THEN
      WITH gone AS (DELETE FROM queen.kv_usage_part p WHERE p.rel = v_rel RETURNING p.tenant_id, p.rows, p.bytes)
      SELECT array_agg(g.tenant_id), array_agg(g.rows), array_agg(g.bytes) INTO v_t, v_r, v_b FROM gone g;
      IF v_t IS NOT NULL THEN
        PERFORM queen.kv_usage_total_add_v1(v_rel, -1, v_t, v_r, v_b);
      END IF;
      DELETE FROM queen.kv_usage_recent x WHERE x.rel = v_rel;
      DELETE FROM queen.kv_usage_slice s WHERE s.rel = v_rel;
      v_n := greatest(1, ceil(v_blocks::numeric / p_pages))::int;
      INSERT INTO queen.kv_usage_slice (rel, slice, counted_at)
      SELECT v_rel, g, NULL FROM generate_series(0, v_n - 1) g;
      INSERT INTO queen.kv_usage_layout AS x (rel, filenode, pages, slices, cover_at)
      VALUES (v_rel, v_filenode, p_pages, v_n, v_seen_at)
      ON CONFLICT (rel) DO UPDATE
        SET filenode = EXCLUDED.filenode, pages = EXCLUDED.pages, slices = EXCLUDED.slices, cover_at = EXCLUDED.cover_at;
    ELSE
      v_n := l.slices;
      IF v_blocks > l.slices::bigint * l.pages THEN
        -- Grown past the last slice: the new slices, as counted empty at the previous cover_at.
        v_n := ceil(v_blocks::numeric / l.pages)::int;
        INSERT INTO queen.kv_usage_slice (rel, slice, counted_at)
        SELECT v_rel, g, l.cover_at FROM generate_series(l.slices, v_n - 1) g;
      END IF;
      -- A relation that shrank (trailing empty pages truncated by a vacuum) keeps its slices: a
      -- slice past the end counts nothing, quickly, and its tenants' parts go.
      UPDATE queen.kv_usage_layout x SET slices = v_n, cover_at = v_seen_at WHERE x.rel = v_rel;
    END IF;
  END LOOP;

  -- The slice counted longest ago, if it is due.
  v_rel := NULL;
  SELECT s.rel, s.slice, x.pages INTO v_rel, v_slice, v_pages
  FROM queen.kv_usage_slice s JOIN queen.kv_usage_layout x ON x.rel = s.rel
  WHERE s.counted_at IS NULL OR s.counted_at <= now() - p_interval / 2
  ORDER BY s.counted_at NULLS FIRST, s.rel, s.slice
  LIMIT 1;
  IF v_rel IS NOT NULL THEN
    -- Block numbers end below 2^32 - 1, so '(4294967295,0)' is past every tuple.
    v_lo := format('(%s,0)', v_slice::bigint * v_pages)::tid;
    v_hi := format('(%s,0)', least((v_slice::bigint + 1) * v_pages, 4294967295))::tid;
    WITH gone AS (DELETE FROM queen.kv_usage_part p WHERE p.rel = v_rel AND p.slice = v_slice RETURNING p.tenant_id, p.rows, p.bytes)
    SELECT array_agg(g.tenant_id), array_agg(g.rows), array_agg(g.bytes) INTO v_t, v_r, v_b FROM gone g;
    IF v_t IS NOT NULL THEN
      PERFORM queen.kv_usage_total_add_v1(v_rel, -1, v_t, v_r, v_b);
    END IF;
    DELETE FROM queen.kv_usage_recent x WHERE x.rel = v_rel AND x.slice = v_slice;
    -- Rows created after v_since, the oldest counted_at now, are also kept by millisecond: every
    -- computed_at this count will be published under is at least v_since (see the header).
    SELECT coalesce(min(s.counted_at), now()) INTO v_since FROM queen.kv_usage_slice s;
    -- One statement for either relation: the branch of the other one is cut at plan time (its
    -- v_rel test is a one-time filter), so each count is one TID range scan.
    SELECT array_agg(q.tenant_id) FILTER (WHERE q.g = 1), array_agg(q.r) FILTER (WHERE q.g = 1), array_agg(q.b) FILTER (WHERE q.g = 1),
           array_agg(q.tenant_id) FILTER (WHERE q.g = 0 AND q.created IS NOT NULL), array_agg(q.created) FILTER (WHERE q.g = 0 AND q.created IS NOT NULL),
           array_agg(q.r) FILTER (WHERE q.g = 0 AND q.created IS NOT NULL), array_agg(q.b) FILTER (WHERE q.g = 0 AND q.created IS NOT NULL)
    INTO v_t, v_r, v_b, v_rt, v_rc, v_rr, v_rb
    FROM (
      SELECT x.tenant_id, x.created, count(*) AS r, sum(x.b)::bigint AS b, GROUPING(x.created) AS g
      FROM (
        SELECT y.tenant_id, CASE WHEN y.created_at > v_since THEN date_trunc('milliseconds', y.created_at) END AS created, y.b
        FROM (
          SELECT k.tenant_id, k.created_at, octet_length(k.namespace) + octet_length(k.key) + pg_column_size(k.value) AS b
          FROM queen.kv k
          WHERE v_rel = 'kv' AND k.ctid >= v_lo AND k.ctid < v_hi AND queen.kv_live_v1(k.expires_at, now())
          UNION ALL
          SELECT t.tenant_id, t.created_at, pg_column_size(t.payload)
          FROM queen.log_timers t
          WHERE v_rel = 'timers' AND t.ctid >= v_lo AND t.ctid < v_hi
        ) y
      ) x
      GROUP BY GROUPING SETS ((x.tenant_id), (x.tenant_id, x.created))
    ) q;
    IF v_t IS NOT NULL THEN
      INSERT INTO queen.kv_usage_part (rel, slice, tenant_id, rows, bytes)
      SELECT v_rel, v_slice, u.t, u.r, u.b FROM unnest(v_t, v_r, v_b) AS u(t, r, b);
    END IF;
    IF v_rt IS NOT NULL THEN
      INSERT INTO queen.kv_usage_recent (rel, slice, tenant_id, created, rows, bytes)
      SELECT v_rel, v_slice, u.t, u.c, u.r, u.b FROM unnest(v_rt, v_rc, v_rr, v_rb) AS u(t, c, r, b);
    END IF;
    v_parts := coalesce(cardinality(v_t), 0);
    IF v_t IS NOT NULL THEN
      PERFORM queen.kv_usage_total_add_v1(v_rel, 1, v_t, v_r, v_b);
    END IF;
    UPDATE queen.kv_usage_slice s SET counted_at = now() WHERE s.rel = v_rel AND s.slice = v_slice;
  END IF;

  SELECT count(*), count(*) FILTER (WHERE s.counted_at IS NULL), min(s.counted_at)
  INTO v_total, v_uncounted, v_at FROM queen.kv_usage_slice s;
  IF v_uncounted = 0 THEN
    v_at := least(v_at, (SELECT min(x.cover_at) FROM queen.kv_usage_layout x));
    -- What is left in kv_usage_recent is newer than v_at: out of the published numbers.
    DELETE FROM queen.kv_usage_recent x WHERE x.created <= v_at;
    WITH measured AS (
      SELECT m.tenant_id, sum(m.r)::bigint AS rows, sum(m.b)::bigint AS bytes, sum(m.t)::bigint AS timers, sum(m.tb)::bigint AS timer_bytes
      FROM (
        SELECT t.tenant_id, t.rows AS r, t.bytes AS b, t.timers AS t, t.timer_bytes AS tb FROM queen.kv_usage_total t
        UNION ALL
        SELECT x.tenant_id, CASE WHEN x.rel = 'kv' THEN -x.rows ELSE 0 END, CASE WHEN x.rel = 'kv' THEN -x.bytes ELSE 0 END,
               CASE WHEN x.rel = 'timers' THEN -x.rows ELSE 0 END, CASE WHEN x.rel = 'timers' THEN -x.bytes ELSE 0 END
        FROM queen.kv_usage_recent x
        UNION ALL
        SELECT u.tenant_id, 0, 0, 0, 0 FROM queen.kv_usage u
      ) m GROUP BY m.tenant_id
    )
    INSERT INTO queen.kv_usage AS u (tenant_id, rows, bytes, timers, timer_bytes, computed_at)
    SELECT m.tenant_id, m.rows, m.bytes, m.timers, m.timer_bytes, v_at FROM measured m ORDER BY m.tenant_id
    ON CONFLICT (tenant_id) DO UPDATE
      SET rows = EXCLUDED.rows, bytes = EXCLUDED.bytes, timers = EXCLUDED.timers,
          timer_bytes = EXCLUDED.timer_bytes, computed_at = EXCLUDED.computed_at
      WHERE u.computed_at <= EXCLUDED.computed_at
        AND ((u.rows, u.bytes, u.timers, u.timer_bytes) IS DISTINCT FROM (EXCLUDED.rows, EXCLUDED.bytes, EXCLUDED.timers, EXCLUDED.timer_bytes)
             OR u.computed_at <= EXCLUDED.computed_at - p_interval / 8);
    GET DIAGNOSTICS v_written = ROW_COUNT;
  END IF;

  RETURN jsonb_build_object(
    'busy', false, 'counted', v_rel IS NOT NULL, 'rel', v_rel, 'slice', v_slice, 'parts', v_parts,
    'slices', v_total, 'uncounted', v_uncounted, 'published', v_uncounted = 0, 'tenants', coalesce(v_written, 0),
    'computedAt', v_at, 'seconds', extract(epoch FROM clock_timestamp() - v_started)::double precision);
END $$;
