-- The log's push path, and what every log rule shares (below). Every log route and the transaction
-- wire's `operations` call the functions of log_push.sql, log_consume.sql and log_apply.sql; the timers
-- sweeper's fire (queen.timers_fire_batch_v1) stores its messages through the same append
-- (queen.log_append_v1). TypeScript only carries JSON.
--
-- Errors: SQLSTATE QK400 with DETAIL {"code", "index"} (a bad request, the API's 400), and QK412
-- with DETAIL {"failedIndex", "ackReason"} (an ack that failed inside the transaction wire: raising
-- aborts the whole bundle, which is the point).
--
-- Tenancy: every entry point takes the tenant first and reaches queues, partitions, messages,
-- consumer groups and leases only through that tenant's queues (queen.queues.tenant_id), so a
-- partitionId, leaseId or transactionId of another tenant is answered exactly as an unknown one.
-- The API passes the x-queen-tenant UUID under QUEEN_TENANCY_HEADER=1, else the default tenant;
-- the sweeper's fire passes the timer's tenant.
--
-- Locks, inside the partitions/messages space (the last of shared/lockOrder.ts): partition rows
-- (push) before partition_consumers rows (ack), each in ascending order, taken up front by
-- queen.log_apply_v1 and queen.log_ack_batch_v1 so two bundles can never wait on each other in a
-- circle. Pop takes one partition_consumers row with SKIP LOCKED and waits on nothing.

-- Queue, partition and consumer-group names: queen.name_ok_v1, and never NULL.
CREATE OR REPLACE FUNCTION queen.log_name_ok_v1(p_name TEXT) RETURNS BOOLEAN
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT p_name IS NOT NULL AND queen.name_ok_v1(p_name)
$$;

-- A jsonb field as text only when it is a JSON string (a number or object is not a name).
CREATE OR REPLACE FUNCTION queen.log_str_v1(p_value JSONB) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN jsonb_typeof(p_value) = 'string' THEN p_value #>> '{}' END
$$;

-- A message's id on the wire (Queen's `message_id` in a push answer, `id` in a pop): a UUID derived
-- from where the message is, (partition, seq), so it needs no column and a duplicate push reports
-- the stored winner's id.
CREATE OR REPLACE FUNCTION queen.log_message_id_v1(p_partition UUID, p_seq BIGINT) RETURNS UUID
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT md5(p_partition::text || '/' || p_seq::text)::uuid
$$;

-- The longest transactionId, in bytes.
CREATE OR REPLACE FUNCTION queen.log_max_transaction_id_bytes_v1() RETURNS INT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 256 $$;

-- Validates one push. `p_index` is the position the 400 names (the item's, or in the transaction
-- wire the operation's).
CREATE OR REPLACE FUNCTION queen.log_check_push_v1(
  p_queue TEXT, p_partition TEXT, p_transaction_id TEXT, p_index INT
) RETURNS VOID LANGUAGE plpgsql AS $$
BEGIN
  IF p_queue IS NULL THEN
    PERFORM queen.fail_v1('log_queue_required', format('Item %s: queue is required (a string).', p_index), p_index);
  END IF;
  IF NOT queen.log_name_ok_v1(p_queue) THEN
    PERFORM queen.fail_v1('log_invalid_queue', format(
      'Item %s: a queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', p_index), p_index);
  END IF;
  IF p_partition IS NOT NULL AND NOT queen.log_name_ok_v1(p_partition) THEN
    PERFORM queen.fail_v1('log_invalid_partition', format(
      'Item %s: a partition name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', p_index), p_index);
  END IF;
  IF p_transaction_id IS NOT NULL AND (length(p_transaction_id) = 0 OR octet_length(p_transaction_id) > queen.log_max_transaction_id_bytes_v1()) THEN
    PERFORM queen.fail_v1('log_invalid_transaction_id', format(
      'Item %s: transactionId is a non-empty string of at most %s bytes.', p_index, queen.log_max_transaction_id_bytes_v1()), p_index);
  END IF;
END $$;

-- What only a client push is refused: a transactionId starting with `timer:`. Those are the
-- sweeper's: a timer fires as 'timer:' || timer_id (queen.timers_fire_v1), and a client push that
-- took one first made the fire a silent duplicate, the timer's payload never delivered. Checked
-- by the client's entry points (log_push_items_v1, log_apply_v1; the fast path declines such an
-- id), never by log_push_v1 (0.1.0's fire called it; the fire writes its own rows now).
CREATE OR REPLACE FUNCTION queen.log_check_client_transaction_id_v1(p_transaction_id TEXT, p_index INT) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  IF starts_with(p_transaction_id, 'timer:') THEN
    PERFORM queen.fail_v1('log_reserved_transaction_id', format(
      'Item %s: transactionIds starting with timer: are reserved for the messages timers deliver; choose another.', p_index), p_index);
  END IF;
END $$;

-- The refusal of a push whose queue was deleted under it three times in a row, in one place for
-- log_ensure_partition_v1 and log_lock_partition_v1 (reached only after the third turn, never on
-- a push that succeeds).
CREATE OR REPLACE FUNCTION queen.log_push_deleted_v1() RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'lock_not_available',
    MESSAGE = 'queue deleted under this push three times in a row';
END $$;

-- The queue and partition, created on first use. ON CONFLICT DO NOTHING writes nothing for an
-- existing row, so the common case is two index probes and no lock.
-- A queue deleted under a push (DELETE /api/v1/resources/queues/:queue): the push reads
-- the queue's id, the delete commits, and the partition's INSERT then broke partitions_queue_id_fkey
-- (a 500). Before creating a partition the queue row is locked FOR KEY SHARE, the lock the foreign
-- key's check takes anyway, so a partition's first push costs nothing more and a push to an
-- existing partition nothing at all (rather than locking the queue row on every push, which would
-- turn concurrent pushes into MultiXact updates of one row; rather than catching
-- foreign_key_violation, which costs a subtransaction per call and hides the cause). Either the
-- delete waits for the push (it deletes the queue with its messages afterwards), or the lock waits
-- for the delete, finds the row gone, and the queue is read again, i.e. created anew: a push that
-- met a delete is answered as one that came after it, as a push to an unknown queue always is.
-- Each turn of the loop follows another transaction's committed delete of this very queue; three
-- in a row within one call are answered as a lock that did not come free (503 lock_timeout, retry).
CREATE OR REPLACE FUNCTION queen.log_ensure_partition_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT, OUT q_id UUID, OUT p_id UUID)
LANGUAGE plpgsql AS $$
BEGIN
  FOR attempt IN 1 .. 3 LOOP
    SELECT q.id INTO q_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    IF q_id IS NULL THEN
      INSERT INTO queen.queues AS q (tenant_id, name) VALUES (p_tenant, p_queue) ON CONFLICT (tenant_id, name) DO NOTHING;
      SELECT q.id INTO q_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
    END IF;
    SELECT p.id INTO p_id FROM queen.partitions p WHERE p.queue_id = q_id AND p.name = p_partition;
    IF p_id IS NOT NULL THEN
      RETURN;
    END IF;
    PERFORM 1 FROM queen.queues q WHERE q.id = q_id FOR KEY SHARE;
    IF FOUND THEN
      INSERT INTO queen.partitions AS p (queue_id, name) VALUES (q_id, p_partition) ON CONFLICT (queue_id, name) DO NOTHING;
      SELECT p.id INTO p_id FROM queen.partitions p WHERE p.queue_id = q_id AND p.name = p_partition;
      RETURN;
    END IF;
  END LOOP;
  PERFORM queen.log_push_deleted_v1();
END $$;

-- The queue and partition as above, and the partition row locked FOR NO KEY UPDATE to commit (what
-- serializes pushes to a partition: seq order is commit order), with its last_seq. When the lock
-- waited for a queue delete and found the partition gone (its queue deleted after
-- log_ensure_partition_v1 read it), the queue and partition are ensured again, so created anew:
-- the push comes after the delete (without it, last_seq was NULL and the message's INSERT
-- failed). Once the lock is held, a delete of the queue waits for this transaction. Bounded as above.
CREATE OR REPLACE FUNCTION queen.log_lock_partition_v1(p_tenant UUID, p_queue TEXT, p_partition TEXT,
  OUT q_id UUID, OUT p_id UUID, OUT last_seq BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
  v_ids RECORD;
BEGIN
  FOR attempt IN 1 .. 3 LOOP
    v_ids := queen.log_ensure_partition_v1(p_tenant, p_queue, p_partition);
    SELECT p.last_seq INTO last_seq FROM queen.partitions p WHERE p.id = v_ids.p_id FOR NO KEY UPDATE;
    IF FOUND THEN
      q_id := v_ids.q_id;
      p_id := v_ids.p_id;
      RETURN;
    END IF;
  END LOOP;
  PERFORM queen.log_push_deleted_v1();
END $$;

-- THE push. Public interface (0.1.0's fire pushed each timer through it, with the timer's tenant and
-- a transactionId derived from the timer id; queen.timers_fire_batch_v1 appends them itself now): creates the tenant's queue and partition on first use; a transactionId already in
-- the partition stores nothing and answers "duplicate". A NULL partition is "Default"; a NULL
-- transactionId gets a fresh UUID.
-- Answer: {"transactionId", "partitionId", "queue", "partition", "status": "queued" | "duplicate"}.
CREATE OR REPLACE FUNCTION queen.log_push_v1(
  p_tenant UUID, p_queue TEXT, p_partition TEXT, p_payload JSONB, p_transaction_id TEXT
) RETURNS JSONB LANGUAGE plpgsql AS $$
DECLARE
  v_partition TEXT := coalesce(p_partition, 'Default');
  v_txid TEXT := coalesce(p_transaction_id, gen_random_uuid()::text);
  v_ids RECORD;
  v_seq BIGINT;
  v_status TEXT;
BEGIN
  PERFORM queen.log_check_push_v1(p_queue, v_partition, v_txid, NULL);
  -- The partition row's lock serializes pushes to this partition until commit: seq order is
  -- commit order, and the append's duplicate check cannot race another push of the same id.
  v_ids := queen.log_lock_partition_v1(p_tenant, p_queue, v_partition);
  PERFORM queen.log_append_v1(false, p_tenant, p_queue, v_partition, ARRAY[p_payload], ARRAY[v_txid], NULL, NULL);
  -- Stored now, or before (a duplicate: the stored winner's seq, at or below the last_seq read
  -- under the lock).
  v_seq := (SELECT m.seq FROM queen.messages m WHERE m.partition_id = v_ids.p_id AND m.transaction_id = v_txid);
  v_status := CASE WHEN v_seq > v_ids.last_seq THEN 'queued' ELSE 'duplicate' END;
  -- Queen's push answer entry (snake_case but queueName, as Queen spells it); a duplicate's
  -- message_id is the stored winner's. `index` is set by the caller that knows the item's place.
  RETURN jsonb_build_object('index', 0, 'transaction_id', v_txid, 'status', v_status,
                            'message_id', queen.log_message_id_v1(v_ids.p_id, v_seq), 'partition_id', v_ids.p_id,
                            'trace_id', NULL, 'queueName', p_queue, 'partition', v_partition);
END $$;

-- POST /api/v1/push's items (and a transaction-wire push operation's items): validated first, all
-- of them; the partitions locked in ascending (queue, partition) order; then pushed in request
-- order. Answers one element per item, in request order. `p_index` (the wire's operation index)
-- names the 400 when given; otherwise the item's index does.
CREATE OR REPLACE FUNCTION queen.log_push_items_v1(p_tenant UUID, p_items JSONB, p_index INT DEFAULT NULL) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_n INT;
  v_item JSONB;
  v_out JSONB[] := '{}';
  v_queue TEXT;
  v_partition TEXT;
  v_payloads JSONB[];
  v_txids TEXT[];
  v_run JSONB[];
  i INT;
  j INT;
  k INT;
BEGIN
  v_n := queen.array_length_v1(p_items, 'log_items_required',
    'items must be a non-empty array of {queue, partition?, payload, transactionId?}.', p_index);
  FOR i IN 0 .. v_n - 1 LOOP
    v_item := p_items->i;
    IF jsonb_typeof(v_item) <> 'object' THEN
      PERFORM queen.fail_v1('log_invalid_item', format('Item %s is not an object.', i), coalesce(p_index, i));
    END IF;
    IF v_item ? 'partition' AND jsonb_typeof(v_item->'partition') NOT IN ('string', 'null') THEN
      PERFORM queen.fail_v1('log_invalid_partition', format('Item %s: partition is a string.', i), coalesce(p_index, i));
    END IF;
    IF v_item ? 'transactionId' AND jsonb_typeof(v_item->'transactionId') NOT IN ('string', 'null') THEN
      PERFORM queen.fail_v1('log_invalid_transaction_id', format('Item %s: transactionId is a string.', i), coalesce(p_index, i));
    END IF;
    PERFORM queen.log_check_push_v1(queen.log_str_v1(v_item->'queue'),
      coalesce(queen.log_str_v1(v_item->'partition'), 'Default'), queen.log_str_v1(v_item->'transactionId'), coalesce(p_index, i));
    PERFORM queen.log_check_client_transaction_id_v1(queen.log_str_v1(v_item->'transactionId'), coalesce(p_index, i));
  END LOOP;
  PERFORM queen.log_lock_partitions_v1(p_tenant, p_items);
  -- Each item validated above and its partition created and locked: the fast path takes each run
  -- of consecutive items to one partition in one call (its expressions set up once, last_seq and
  -- the NOTIFY once a run), unless queen.log_fast_path = off, and then log_push_v1 does, as it
  -- always did. (Validated items are all the fast path's: it answers a whole run or none of it.)
  i := 0;
  WHILE i < v_n LOOP
    v_queue := p_items->i->>'queue';
    v_partition := coalesce(p_items->i->>'partition', 'Default');
    v_payloads := '{}';
    v_txids := '{}';
    j := i;
    WHILE j < v_n AND p_items->j->>'queue' = v_queue AND coalesce(p_items->j->>'partition', 'Default') = v_partition LOOP
      v_payloads := v_payloads || (p_items->j->'payload');
      v_txids := v_txids || coalesce(p_items->j->>'transactionId', '');
      j := j + 1;
    END LOOP;
    v_run := queen.log_push_fast_many_v1(p_tenant, v_queue, v_partition, v_payloads, v_txids);
    FOR k IN i .. j - 1 LOOP
      v_item := p_items->k;
      v_out := v_out || (coalesce(v_run[k - i + 1],
        queen.log_push_v1(p_tenant, v_item->>'queue', v_item->>'partition', v_item->'payload', v_item->>'transactionId'))
        || jsonb_build_object('index', k));
    END LOOP;
    i := j;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;

-- THE append: every message the log stores is written here, by one INSERT (a client push on either
-- path, and a timer's fire). Items in order, to one queue and partition that already exist (given
-- as values: queue and partition as text, the partition already defaulted; each item's payload,
-- transactionId and trace context). The partition row is locked FOR NO KEY UPDATE, held to commit,
-- so seq order is commit order. Per item: a transactionId already in the partition (stored before,
-- or by an earlier item) is a duplicate, nothing stored; else the message, numbered after last_seq.
-- Then last_seq once, with `ready` (the partition has something to read: log_consume.sql's rule),
-- and the NOTIFY once.
-- p_fast true is the push fast path (through queen.log_push_fast_many_v1), which answers one
-- element per item and declines what it does not know to be valid: NULL, having done nothing, for
-- a name the general path might refuse, a queue or partition not created yet, or SET
-- queen.log_fast_path = off; a NULL element, that item skipped, for a transactionId the general path
-- might refuse (empty, over 256 bytes, or the sweeper's `timer:` prefix); the general path then
-- decides, refusals included, so every rule keeps one definition. The names' test is
-- queen.name_ok_v1, the one definition of a name.
-- p_fast false is a caller that checked every item and created and locked the partition itself
-- (the general path, queen.log_push_v1, and the fire, queen.timers_fire_batch_v1): nothing is
-- declined, nothing answered (NULL); it reads what it needs from the partition's last_seq and the
-- rows. A flag rather than a second body: what a message row is, and the rules that number it,
-- are written once, and the fast path calls no more functions than before (the wrapper inlines).
-- Why the fast path pays: a push is a transaction of its own, and plpgsql sets up every expression
-- and nested call it evaluates once per transaction, so the general path's cost is its number of
-- statements and calls (validation twice, ensure-partition twice, the lock twice), not their work.
-- Here: one guard and one lock for all the items; per item, the duplicate check (after the lock,
-- so it sees every committed push and the items before it) and the message; then last_seq once
-- and the NOTIFY once. For a gathering that is what pays: four pushes in one statement took
-- 0.61-0.77 ms against 0.80-0.91 when each item locked, bumped last_seq and notified on its own,
-- eight 0.68-1.04 against 0.83-1.45 (pgbench, one client, 2026-11-30). (One INSERT ... ON CONFLICT
-- DO NOTHING feeding the UPDATE measured the same as the duplicate check, 2026-11-30; one set-based
-- statement for all the items cost a one-item push 125 µs against these statements' 40, 2026-12-07.)
-- test/log/fastPath.test.ts holds both paths to the same answers and rows.
CREATE OR REPLACE FUNCTION queen.log_append_v1(p_fast BOOLEAN, p_tenant UUID, p_queue TEXT, p_partition TEXT,
  p_payloads JSONB[], p_transaction_ids TEXT[], p_trace_ids UUID[], p_span_ids BYTEA[]) RETURNS JSONB[]
LANGUAGE plpgsql AS $$
DECLARE
  v_pid UUID;
  v_last BIGINT;
  v_seq BIGINT;
  v_txid TEXT;
  v_status TEXT;
  v_at BIGINT;
  v_out JSONB[] := '{}';
  i INT;
BEGIN
  IF NOT coalesce(queen.name_ok_v1(p_queue) AND queen.name_ok_v1(p_partition), false)
     OR (p_fast AND current_setting('queen.log_fast_path', true) IS NOT DISTINCT FROM 'off') THEN
    RETURN NULL;
  END IF;
  SELECT p.id, p.last_seq INTO v_pid, v_last
    FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
   WHERE q.tenant_id = p_tenant AND q.name = p_queue AND p.name = p_partition
     FOR NO KEY UPDATE OF p;
  IF v_pid IS NULL THEN
    RETURN NULL;
  END IF;
  v_seq := v_last;
  FOR i IN 1 .. cardinality(p_transaction_ids) LOOP
    v_txid := p_transaction_ids[i];
    IF p_fast AND (NOT coalesce(octet_length(v_txid) <= queen.log_max_transaction_id_bytes_v1(), false) OR starts_with(v_txid, 'timer:')) THEN
      v_out := v_out || NULL::jsonb;
      CONTINUE;
    END IF;
    IF v_txid = '' THEN
      v_txid := gen_random_uuid()::text;
    END IF;
    v_at := (SELECT m.seq FROM queen.messages m WHERE m.partition_id = v_pid AND m.transaction_id = v_txid);
    IF v_at IS NOT NULL THEN
      v_status := 'duplicate';
    ELSE
      v_seq := v_seq + 1;
      v_at := v_seq;
      INSERT INTO queen.messages (partition_id, seq, transaction_id, payload, trace_id, span_id)
      VALUES (v_pid, v_seq, v_txid, p_payloads[i], p_trace_ids[i], p_span_ids[i]);
      v_status := 'queued';
    END IF;
    IF p_fast THEN
      -- The entry log_push_v1 answers (the same keys, so both paths answer alike).
      v_out := v_out || jsonb_build_object('index', i - 1, 'transaction_id', v_txid, 'status', v_status,
                                           'message_id', queen.log_message_id_v1(v_pid, v_at), 'partition_id', v_pid,
                                           'trace_id', NULL, 'queueName', p_queue, 'partition', p_partition);
    END IF;
  END LOOP;
  IF v_seq > v_last THEN
    UPDATE queen.partitions SET last_seq = v_seq, ready = true WHERE id = v_pid;
    -- Wakes long-polling pops on commit; identical payloads in one transaction fold into one.
    -- '<tenant>/<queue>': a pop waits on its own tenant's queue (services/api/push/signal.ts).
    PERFORM pg_notify('queen_log', p_tenant::text || '/' || p_queue);
  END IF;
  RETURN CASE WHEN p_fast THEN v_out END;
END $$;

-- The push fast path (queen.log_append_v1 with p_fast): plainly valid items, in order, to one
-- queue and partition that already exist. Its callers: a request of one item alone
-- (log_push_request_v1, through log_push_fast_v1), each item of a request log_push_items_v1 has
-- validated, created and locked (the same), and the one-item requests an API worker gathered for
-- one partition (log_push_coalesced_v1). Answers one element per item, or NULL when it declined.
-- A SQL function the planner inlines: no call layer over the body.
CREATE OR REPLACE FUNCTION queen.log_push_fast_many_v1(
  p_tenant UUID, p_queue TEXT, p_partition TEXT, p_payloads JSONB[], p_transaction_ids TEXT[]
) RETURNS JSONB[] LANGUAGE sql AS $$
  SELECT queen.log_append_v1(true, p_tenant, p_queue, p_partition, p_payloads, p_transaction_ids, NULL, NULL)
$$;

-- One item: the fast path above with one element.
CREATE OR REPLACE FUNCTION queen.log_push_fast_v1(
  p_tenant UUID, p_queue TEXT, p_partition TEXT, p_payload JSONB, p_transaction_id TEXT
) RETURNS JSONB LANGUAGE sql AS $$
  SELECT (queen.log_push_fast_many_v1(p_tenant, p_queue, p_partition, ARRAY[p_payload], ARRAY[p_transaction_id]))[1]
$$;

-- How the fast path reads a push request's items (the one-item request alone, and each body of a
-- gathering): the item when the items are one object, else NULL; its queue when a string; its
-- partition when a string, 'Default' when absent or null; its transactionId '' when absent or
-- null, the string when a non-empty string. NULL anywhere else: the fast path declines and the
-- general path decides, refusals included. SQL the planner inlines into its callers, and only
-- functions that cannot fail on any jsonb (with a parameter as a constant the planner may evaluate
-- them while planning, CASE or not).
CREATE OR REPLACE FUNCTION queen.log_fast_item_v1(p_items JSONB) RETURNS JSONB LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(p_items) = 'array' AND p_items->1 IS NULL AND jsonb_typeof(p_items->0) = 'object' THEN p_items->0 END
$$;
CREATE OR REPLACE FUNCTION queen.log_fast_queue_v1(p_item JSONB) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN jsonb_typeof(p_item->'queue') = 'string' THEN p_item->>'queue' END
$$;
CREATE OR REPLACE FUNCTION queen.log_fast_partition_v1(p_item JSONB) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE coalesce(jsonb_typeof(p_item->'partition'), 'null') WHEN 'null' THEN 'Default' WHEN 'string' THEN p_item->>'partition' END
$$;
CREATE OR REPLACE FUNCTION queen.log_fast_transaction_id_v1(p_item JSONB) RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE coalesce(jsonb_typeof(p_item->'transactionId'), 'null') WHEN 'null' THEN '' WHEN 'string' THEN nullif(p_item->>'transactionId', '') END
$$;

-- One request's items through the fast path when they are a single item: its answer, or NULL when
-- the shape is anything else or the fast path declined (having done nothing). Inlined into its
-- caller, as are the readers above.
CREATE OR REPLACE FUNCTION queen.log_push_one_fast_v1(p_tenant UUID, p_items JSONB) RETURNS JSONB LANGUAGE sql AS $$
  SELECT CASE WHEN queen.log_fast_item_v1(p_items) IS NOT NULL THEN
    queen.log_push_fast_v1(p_tenant, queen.log_fast_queue_v1(p_items->0), queen.log_fast_partition_v1(p_items->0),
                           p_items->0->'payload', queen.log_fast_transaction_id_v1(p_items->0))
  END
$$;

-- POST /api/v1/push's entry: one item tries the fast path (inlined into the route's statement, a
-- named statement planned once per connection, sparing a plpgsql call); a declined fast path has
-- done nothing and log_push_items_v1 answers as it always did.
CREATE OR REPLACE FUNCTION queen.log_push_request_v1(p_tenant UUID, p_items JSONB) RETURNS JSONB LANGUAGE sql AS $$
  SELECT coalesce(nullif(jsonb_build_array(queen.log_push_one_fast_v1(p_tenant, p_items)), '[null]'::jsonb),
                  queen.log_push_items_v1(p_tenant, p_items))
$$;

-- One tenant's one-item pushes to one partition that an API worker gathered while an earlier push to that
-- partition was in flight (services/api/push/coalescer.ts says why): the bodies whose one item goes
-- to the first such body's queue and partition, through the fast path in one call, so one lock and
-- one commit serve them all. Answers one row per body, in order: that request's results array, or
-- NULL where the fast path declined it (a shape or transactionId it does not take, another
-- partition, having done nothing for it); the API then sends that request alone, down the general
-- path.
CREATE OR REPLACE FUNCTION queen.log_push_coalesced_v1(p_tenant UUID, p_bodies JSONB) RETURNS SETOF TEXT
LANGUAGE plpgsql AS $$
DECLARE
  v_item JSONB;
  v_q TEXT;
  v_p TEXT;
  v_queue TEXT;
  v_partition TEXT;
  v_taken INT[] := '{}';
  v_payloads JSONB[] := '{}';
  v_txids TEXT[] := '{}';
  v_answers JSONB[];
  v_n INT := jsonb_array_length(p_bodies);
  v_at INT;
  i INT;
BEGIN
  FOR i IN 0 .. v_n - 1 LOOP
    v_item := queen.log_fast_item_v1(p_bodies->i->'items');
    v_q := queen.log_fast_queue_v1(v_item);
    v_p := queen.log_fast_partition_v1(v_item);
    CONTINUE WHEN v_q IS NULL OR v_p IS NULL;
    IF v_queue IS NULL THEN
      v_queue := v_q;
      v_partition := v_p;
    END IF;
    CONTINUE WHEN v_q <> v_queue OR v_p <> v_partition;
    v_taken := v_taken || i;
    v_payloads := v_payloads || (v_item->'payload');
    -- NULL (a transactionId the fast path does not take): that element is declined.
    v_txids := v_txids || queen.log_fast_transaction_id_v1(v_item);
  END LOOP;
  IF v_queue IS NOT NULL THEN
    v_answers := queen.log_push_fast_many_v1(p_tenant, v_queue, v_partition, v_payloads, v_txids);
  END IF;
  FOR i IN 0 .. v_n - 1 LOOP
    v_at := array_position(v_taken, i);
    -- Each request is its own one item: index 0, whatever its place in the gathering.
    RETURN NEXT CASE WHEN v_answers[v_at] IS NOT NULL THEN jsonb_build_array(v_answers[v_at] || '{"index": 0}'::jsonb)::text END;
  END LOOP;
END $$;

-- Two queue options every client push obeys (sql/migrations/051_queue_options.sql), checked by the
-- v2 entry points below; a timer's fire (queen.timers_fire_batch_v1) obeys neither check:
-- it was accepted when it was scheduled, and is stored as the timer holds it.

-- encryptionEnabled: items to an encrypted queue must arrive sealed (encrypted by the API, which
-- holds the key: services/api/seal/). `p_sealed` is aligned with `p_items`: the sealed text of an
-- item's payload, or null for an item the API did not seal. When an item to an encrypted queue is
-- not sealed, raises QK428 with DETAIL {"queues": [...]} (the encrypted queues among the items):
-- the API reads those items' payloads (queen.log_seal_texts_v1), seals them and sends the request
-- again; nothing was written. One probe per distinct queue, none on a cell without options rows.
CREATE OR REPLACE FUNCTION queen.log_check_sealed_v1(p_tenant UUID, p_items JSONB, p_sealed JSONB) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
  v_encrypted TEXT[];
BEGIN
  SELECT array_agg(q.name ORDER BY q.name) INTO v_encrypted
    FROM queen.queues q JOIN queen.queue_options o ON o.queue_id = q.id
   WHERE q.tenant_id = p_tenant AND q.name = ANY (queen.log_item_queues_v1(p_items)) AND o.encryption_enabled;
  IF v_encrypted IS NULL THEN RETURN; END IF;
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_items) WITH ORDINALITY AS t (e, k)
              WHERE e->>'queue' = ANY (v_encrypted) AND jsonb_typeof(p_sealed->(k::int - 1)) IS DISTINCT FROM 'string') THEN
    RAISE EXCEPTION USING ERRCODE = 'QK428', MESSAGE = 'sealing_required', DETAIL = jsonb_build_object('queues', v_encrypted)::text;
  END IF;
END $$;

-- The items with each sealed payload in place of the plaintext one (p_sealed as above; NULL: as given).
CREATE OR REPLACE FUNCTION queen.log_sealed_items_v1(p_items JSONB, p_sealed JSONB) RETURNS JSONB
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN p_sealed IS NULL OR jsonb_typeof(p_items) <> 'array' THEN p_items
    ELSE (SELECT coalesce(jsonb_agg(CASE WHEN jsonb_typeof(p_sealed->(k::int - 1)) = 'string' AND jsonb_typeof(e) = 'object'
                                         THEN e || jsonb_build_object('payload', p_sealed->(k::int - 1)) ELSE e END ORDER BY k), '[]'::jsonb)
            FROM jsonb_array_elements(p_items) WITH ORDINALITY AS t (e, k)) END
$$;

-- What the API seals: the payload (as jsonb text: numbers exact) of each item to one of p_queues,
-- NULL for the others, aligned with the items.
CREATE OR REPLACE FUNCTION queen.log_seal_texts_v1(p_items JSONB, p_queues TEXT[]) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_agg(CASE WHEN e->>'queue' = ANY (p_queues) THEN coalesce(e->'payload', 'null'::jsonb)::text END ORDER BY k), '{}')
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_items) = 'array' THEN p_items ELSE '[]' END) WITH ORDINALITY AS t (e, k)
$$;

-- The items of a transaction wire's push operations, in order (what p_sealed aligns with there).
CREATE OR REPLACE FUNCTION queen.log_op_items_v1(p_ops JSONB) RETURNS JSONB
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(jsonb_agg(it ORDER BY o, k), '[]'::jsonb)
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_ops) = 'array' THEN p_ops ELSE '[]' END) WITH ORDINALITY AS x (op, o),
         jsonb_array_elements(CASE WHEN jsonb_typeof(op) = 'object' AND op->>'type' = 'push' AND jsonb_typeof(op->'items') = 'array'
                                   THEN op->'items' ELSE '[]' END) WITH ORDINALITY AS y (it, k)
$$;

-- A queue's unconsumed messages, as maxSize counts them: per partition, the messages past the
-- cursor of the group furthest behind on it (every message, when no group reads it yet). Cost: one
-- probe per partition of the queue.
CREATE OR REPLACE FUNCTION queen.log_unconsumed_v1(p_queue_id UUID) RETURNS BIGINT
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN (SELECT coalesce(sum(p.last_seq - coalesce((SELECT min(c.cursor_seq) FROM queen.partition_consumers c WHERE c.partition_id = p.id), 0)), 0)
            FROM queen.partitions p WHERE p.queue_id = p_queue_id);
END $$;

-- maxSize: after a request's pushes, any of these queues (of the tenant) holding more unconsumed
-- messages than its max_size refuses the request: 429 log_queue_full, raised, so the statement (and
-- in the transaction wire the whole bundle) rolls back and no item of it is stored. 429 because
-- waiting resolves it: consumers draining the queue make room. `p_index` names the item or operation.
-- Pushes to different partitions of a capped queue hold different partition locks, so each would
-- count without the other's rows and together pass the cap: a transaction-scoped advisory lock per
-- capped queue (taken in name order, after the partition locks, held to commit) makes them count
-- in turn, each seeing what the one before committed. Queues without maxSize take none.
CREATE OR REPLACE FUNCTION queen.log_check_size_v1(p_tenant UUID, p_queues TEXT[], p_index INT) RETURNS VOID
LANGUAGE plpgsql AS $$
DECLARE
  r RECORD;
  v_count BIGINT;
BEGIN
  FOR r IN SELECT q.id, q.name, o.max_size FROM queen.queues q JOIN queen.queue_options o ON o.queue_id = q.id
            WHERE q.tenant_id = p_tenant AND q.name = ANY (p_queues) AND o.max_size > 0 ORDER BY q.name LOOP
    -- 1902472411: this lock's class (no other advisory lock of the cell uses it); the queue's id hashed.
    PERFORM pg_advisory_xact_lock(1902472411, hashtext(r.id::text));
    v_count := queen.log_unconsumed_v1(r.id);
    IF v_count > r.max_size THEN
      PERFORM queen.fail_v1('log_queue_full', format(
        'Queue %s holds at most %s unconsumed messages (maxSize) and this push would leave %s; nothing was stored. Retry once consumers have made room.',
        r.name, r.max_size, v_count), p_index);
    END IF;
  END LOOP;
END $$;

-- Marks the messages a request stored from sealed items as encrypted. `p_results` is
-- log_push_items_v1's answer (one element per item), p_sealed aligned with it as above; a duplicate
-- stored nothing and marks nothing.
CREATE OR REPLACE FUNCTION queen.log_mark_sealed_v1(p_results JSONB, p_sealed JSONB) RETURNS VOID
LANGUAGE plpgsql AS $$
BEGIN
  IF p_sealed IS NULL OR jsonb_typeof(p_sealed) <> 'array' THEN RETURN; END IF;
  INSERT INTO queen.sealed_messages (partition_id, seq)
  SELECT m.partition_id, m.seq FROM jsonb_array_elements(p_results) WITH ORDINALITY AS t (e, k)
    JOIN queen.messages m ON m.partition_id = (e->>'partition_id')::uuid AND m.transaction_id = e->>'transaction_id'
   WHERE e->>'status' = 'queued' AND jsonb_typeof(p_sealed->(k::int - 1)) = 'string'
  ON CONFLICT DO NOTHING;
END $$;

-- The distinct queue names of a push's items (strings only; the checks of the push refuse others).
CREATE OR REPLACE FUNCTION queen.log_item_queues_v1(p_items JSONB) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_agg(DISTINCT e->>'queue'), '{}') FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_items) = 'array' THEN p_items ELSE '[]' END) e
   WHERE jsonb_typeof(e->'queue') = 'string'
$$;

-- POST /api/v1/push's entry since 0.2: queen.log_push_request_v1 between the two checks above.
-- Items to an encrypted queue not sealed by the API: QK428 before anything is written. After the
-- pushes, a queue past its maxSize refuses the whole request (raised: nothing of it stays).
-- `p_sealed` (aligned with the items): the sealed text of each payload the API sealed; those
-- items are stored with it in place of the plaintext, and their messages marked.
-- A request none of whose queues has maxSize or encryption (one probe) goes straight to v1: the
-- checks' four calls cost as much again as the push itself (npm run bench:push, bench/README.md).
CREATE OR REPLACE FUNCTION queen.log_push_request_v2(p_tenant UUID, p_items JSONB, p_sealed JSONB DEFAULT NULL) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_queues TEXT[];
  v_items JSONB;
  v_out JSONB;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  -- The items' queues read in place (a SQL function with an aggregate is planned at every call).
  IF p_sealed IS NULL AND NOT EXISTS (SELECT 1 FROM queen.queues q JOIN queen.queue_options o ON o.queue_id = q.id
       WHERE q.tenant_id = p_tenant AND (o.max_size > 0 OR o.encryption_enabled)
         AND q.name IN (SELECT e->>'queue' FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_items) = 'array' THEN p_items ELSE '[]' END) e)) THEN
    RETURN queen.log_push_request_v1(p_tenant, p_items);
  END IF;
  v_queues := queen.log_item_queues_v1(p_items);
  v_items := queen.log_sealed_items_v1(p_items, p_sealed);
  PERFORM queen.log_check_sealed_v1(p_tenant, p_items, p_sealed);
  v_out := queen.log_push_request_v1(p_tenant, v_items);
  PERFORM queen.log_mark_sealed_v1(v_out, p_sealed);
  -- One item: its index is named, as the item's other refusals are.
  PERFORM queen.log_check_size_v1(p_tenant, v_queues, CASE WHEN jsonb_array_length(p_items) = 1 THEN 0 END);
  RETURN v_out;
END $$;

-- queen.log_push_coalesced_v1 for queues without maxSize and encryption; a gathering for a queue
-- with either is declined whole (NULL for every body), so each request goes alone through
-- queen.log_push_request_v2 and gets its own answer (a full queue refuses only the requests that
-- do not fit).
CREATE OR REPLACE FUNCTION queen.log_push_coalesced_v2(p_tenant UUID, p_bodies JSONB) RETURNS SETOF TEXT
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF EXISTS (SELECT 1 FROM queen.queues q JOIN queen.queue_options o ON o.queue_id = q.id
              WHERE q.tenant_id = p_tenant AND (o.max_size > 0 OR o.encryption_enabled)
                AND q.name IN (SELECT queen.log_fast_queue_v1(queen.log_fast_item_v1(b->'items')) FROM jsonb_array_elements(p_bodies) b)) THEN
    RETURN QUERY SELECT NULL::text FROM jsonb_array_elements(p_bodies);
    RETURN;
  END IF;
  RETURN QUERY SELECT queen.log_push_coalesced_v1(p_tenant, p_bodies);
END $$;

-- Trace context on a message (sql/migrations/056_trace_context.sql, docs/tracing.md). A push with
-- none (no item traceId, tracing off or the request not sampled) goes through the statements above
-- as it always did; one with some goes through the _traced entry points below, which push the
-- same way and then stamp the messages they stored. `p_trace` is the pushing request's sampled
-- span, {"traceId": 32 hex digits, "spanId": 16}, or NULL.

-- Queen's traceId on a push item: NULL when absent, null or ""; else UUID text (8-4-4-4-12 hex
-- digits, either case), or 400 log_invalid_trace_id naming the item (`p_index`).
CREATE OR REPLACE FUNCTION queen.log_trace_id_v1(p_value JSONB, p_index INT) RETURNS UUID
LANGUAGE plpgsql AS $$
BEGIN
  IF p_value IS NULL OR jsonb_typeof(p_value) = 'null' OR p_value = '""'::jsonb THEN
    RETURN NULL;
  END IF;
  IF jsonb_typeof(p_value) <> 'string'
     OR (p_value #>> '{}') !~ '^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$' THEN
    PERFORM queen.fail_v1('log_invalid_trace_id', format(
      'Item %s: traceId is UUID text (such as 4bf92f35-77b3-4da6-a3ce-929d0e0e4736), or "" for none.', p_index), p_index);
  END IF;
  RETURN (p_value #>> '{}')::uuid;
END $$;

-- A message's W3C traceparent (version 00, sampled: only a sampled span's context is stored), or
-- NULL when its span is unknown. The trace id is the UUID's 32 hex digits.
CREATE OR REPLACE FUNCTION queen.log_traceparent_v1(p_trace UUID, p_span BYTEA) RETURNS TEXT
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN p_trace IS NOT NULL AND octet_length(p_span) = 8
              THEN '00-' || replace(p_trace::text, '-', '') || '-' || encode(p_span, 'hex') || '-01' END
$$;

-- Stamps the messages a push just stored: each `queued` entry of p_results (aligned with p_items)
-- gets its item's traceId, else the caller's trace; the span id is the caller's when the trace is
-- the caller's (an item's traceId that is another trace has no span here). A duplicate stored
-- nothing and keeps what its message has. Every item's traceId is checked, stamped or not. One
-- UPDATE per stamped message, through the (partition_id, transaction_id) key; a HOT update (no
-- index holds the columns). Answers p_results with each stamped entry's trace_id, as Queen's does.
CREATE OR REPLACE FUNCTION queen.log_stamp_traces_v1(p_results JSONB, p_items JSONB, p_trace JSONB, p_index INT DEFAULT NULL) RETURNS JSONB
LANGUAGE plpgsql AS $$
DECLARE
  v_trace UUID := (p_trace ->> 'traceId')::uuid;
  v_span BYTEA := decode(p_trace ->> 'spanId', 'hex');
  v_out JSONB[] := '{}';
  v_e JSONB;
  v_id UUID;
  i INT;
BEGIN
  FOR i IN 0 .. jsonb_array_length(p_results) - 1 LOOP
    v_e := p_results -> i;
    v_id := coalesce(queen.log_trace_id_v1(p_items -> i -> 'traceId', coalesce(p_index, i)), v_trace);
    IF v_id IS NOT NULL AND v_e ->> 'status' = 'queued' THEN
      UPDATE queen.messages SET trace_id = v_id, span_id = CASE WHEN v_id = v_trace THEN v_span END
       WHERE partition_id = (v_e ->> 'partition_id')::uuid AND transaction_id = v_e ->> 'transaction_id';
      v_e := v_e || jsonb_build_object('trace_id', v_id);
    END IF;
    v_out := v_out || v_e;
  END LOOP;
  RETURN to_jsonb(v_out);
END $$;

-- POST /api/v1/push with trace context: queen.log_push_request_v2, then the stamp.
CREATE OR REPLACE FUNCTION queen.log_push_traced_v1(p_tenant UUID, p_items JSONB, p_trace JSONB, p_sealed JSONB DEFAULT NULL) RETURNS JSONB
LANGUAGE sql AS $$
  SELECT queen.log_stamp_traces_v1(r, p_items, p_trace) FROM (SELECT queen.log_push_request_v2(p_tenant, p_items, p_sealed) AS r OFFSET 0) s
$$;

-- A gathering (queen.log_push_coalesced_v2) of which a body has trace context: `p_traces` is aligned
-- with the bodies (each its request's span, or null). Each answered body's results are stamped
-- with its own items and span; a declined body (NULL) is sent alone by the API, traced.
CREATE OR REPLACE FUNCTION queen.log_push_coalesced_traced_v1(p_tenant UUID, p_bodies JSONB, p_traces JSONB) RETURNS SETOF TEXT
LANGUAGE sql AS $$
  SELECT CASE WHEN r.results IS NOT NULL
              THEN queen.log_stamp_traces_v1(r.results::jsonb, p_bodies -> (r.k::int - 1) -> 'items', p_traces -> (r.k::int - 1))::text END
    FROM queen.log_push_coalesced_v2(p_tenant, p_bodies) WITH ORDINALITY AS r (results, k)
   ORDER BY r.k
$$;
