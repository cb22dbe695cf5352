-- tables
TABLE consumer_groups
TABLE consumer_retry_at
TABLE kv fillfactor=70,vacuum_truncate=off
TABLE kv_quota
TABLE kv_rate_bucket
TABLE kv_rate_process
TABLE kv_usage
TABLE kv_usage_layout
TABLE kv_usage_part
TABLE kv_usage_recent
TABLE kv_usage_slice
TABLE kv_usage_total
TABLE log_timers vacuum_truncate=off
TABLE message_failure_texts
TABLE message_failures
TABLE message_traces
TABLE messages
TABLE partition_consumers fillfactor=70
TABLE partitions
TABLE queue_delays
TABLE queue_options
TABLE queue_retention
TABLE queues
TABLE schema_definitions
TABLE schema_migrations
TABLE sealed_messages
TABLE sealed_timers
TABLE shared_leases
TABLE sweeper_shards
TABLE system_state
TABLE tenant_moves

-- columns
COLUMN consumer_groups.queue_id uuid NOT NULL
COLUMN consumer_groups.consumer_group text COLLATE "C" NOT NULL
COLUMN consumer_retry_at.partition_id uuid NOT NULL
COLUMN consumer_retry_at.consumer_group text COLLATE "C" NOT NULL
COLUMN consumer_retry_at.retry_at timestamp with time zone NOT NULL
COLUMN kv.tenant_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001'::uuid
COLUMN kv.namespace text COLLATE "C" NOT NULL
COLUMN kv.key text COLLATE "C" NOT NULL
COLUMN kv.value jsonb NOT NULL
COLUMN kv.version bigint NOT NULL
COLUMN kv.expires_at timestamp with time zone
COLUMN kv.shard smallint NOT NULL GENERATED  DEFAULT ((hashtextextended(key, (0)::bigint) & (63)::bigint))::smallint
COLUMN kv.created_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN kv.updated_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN kv_quota.tenant_id uuid NOT NULL
COLUMN kv_quota.granted boolean NOT NULL DEFAULT true
COLUMN kv_quota.enabled boolean NOT NULL DEFAULT true
COLUMN kv_quota.max_rows bigint
COLUMN kv_quota.max_bytes bigint
COLUMN kv_quota.max_timers bigint
COLUMN kv_quota.updated_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN kv_rate_bucket.tenant text COLLATE "C" NOT NULL
COLUMN kv_rate_bucket.scope text COLLATE "C" NOT NULL
COLUMN kv_rate_bucket.tokens double precision NOT NULL
COLUMN kv_rate_bucket.at timestamp with time zone NOT NULL
COLUMN kv_rate_process.process text COLLATE "C" NOT NULL
COLUMN kv_rate_process.seen_at timestamp with time zone NOT NULL
COLUMN kv_usage.tenant_id uuid NOT NULL
COLUMN kv_usage.rows bigint NOT NULL DEFAULT 0
COLUMN kv_usage.bytes bigint NOT NULL DEFAULT 0
COLUMN kv_usage.timers bigint NOT NULL DEFAULT 0
COLUMN kv_usage.timer_bytes bigint NOT NULL DEFAULT 0
COLUMN kv_usage.computed_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN kv_usage_layout.rel text NOT NULL
COLUMN kv_usage_layout.filenode oid NOT NULL
COLUMN kv_usage_layout.pages integer NOT NULL
COLUMN kv_usage_layout.slices integer NOT NULL
COLUMN kv_usage_layout.cover_at timestamp with time zone NOT NULL
COLUMN kv_usage_part.rel text NOT NULL
COLUMN kv_usage_part.slice integer NOT NULL
COLUMN kv_usage_part.tenant_id uuid NOT NULL
COLUMN kv_usage_part.rows bigint NOT NULL
COLUMN kv_usage_part.bytes bigint NOT NULL
COLUMN kv_usage_recent.rel text NOT NULL
COLUMN kv_usage_recent.slice integer NOT NULL
COLUMN kv_usage_recent.tenant_id uuid NOT NULL
COLUMN kv_usage_recent.created timestamp with time zone NOT NULL
COLUMN kv_usage_recent.rows bigint NOT NULL
COLUMN kv_usage_recent.bytes bigint NOT NULL
COLUMN kv_usage_slice.rel text NOT NULL
COLUMN kv_usage_slice.slice integer NOT NULL
COLUMN kv_usage_slice.counted_at timestamp with time zone
COLUMN kv_usage_total.tenant_id uuid NOT NULL
COLUMN kv_usage_total.rows bigint NOT NULL DEFAULT 0
COLUMN kv_usage_total.bytes bigint NOT NULL DEFAULT 0
COLUMN kv_usage_total.timers bigint NOT NULL DEFAULT 0
COLUMN kv_usage_total.timer_bytes bigint NOT NULL DEFAULT 0
COLUMN log_timers.timer_id uuid NOT NULL DEFAULT gen_random_uuid()
COLUMN log_timers.tenant_id uuid NOT NULL
COLUMN log_timers.timer_key text COLLATE "C"
COLUMN log_timers.queue text NOT NULL
COLUMN log_timers.partition text NOT NULL DEFAULT 'Default'::text
COLUMN log_timers.payload jsonb NOT NULL
COLUMN log_timers.deliver_at timestamp with time zone NOT NULL
COLUMN log_timers.created_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN log_timers.shard smallint NOT NULL GENERATED  DEFAULT ((uuid_hash_extended(timer_id, (0)::bigint) & (63)::bigint))::smallint
COLUMN log_timers.trace_id uuid
COLUMN log_timers.span_id bytea
COLUMN message_failure_texts.partition_id uuid NOT NULL
COLUMN message_failure_texts.consumer_group text COLLATE "C" NOT NULL
COLUMN message_failure_texts.seq bigint NOT NULL
COLUMN message_failure_texts.error_message text NOT NULL
COLUMN message_failures.partition_id uuid NOT NULL
COLUMN message_failures.consumer_group text COLLATE "C" NOT NULL
COLUMN message_failures.seq bigint NOT NULL
COLUMN message_failures.failures integer NOT NULL DEFAULT 0
COLUMN message_failures.last_failed_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN message_failures.dead_lettered_at timestamp with time zone
COLUMN message_traces.partition_id uuid NOT NULL
COLUMN message_traces.transaction_id text COLLATE "C" NOT NULL
COLUMN message_traces.n integer NOT NULL
COLUMN message_traces.consumer_group text COLLATE "C" NOT NULL
COLUMN message_traces.event_type text COLLATE "C" NOT NULL
COLUMN message_traces.trace_names text[] NOT NULL DEFAULT '{}'::text[]
COLUMN message_traces.data jsonb
COLUMN message_traces.created_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN messages.partition_id uuid NOT NULL
COLUMN messages.seq bigint NOT NULL
COLUMN messages.transaction_id text COLLATE "C" NOT NULL
COLUMN messages.payload jsonb
COLUMN messages.created_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN messages.trace_id uuid
COLUMN messages.span_id bytea
COLUMN partition_consumers.partition_id uuid NOT NULL
COLUMN partition_consumers.consumer_group text COLLATE "C" NOT NULL
COLUMN partition_consumers.cursor_seq bigint NOT NULL DEFAULT 0
COLUMN partition_consumers.done_seqs bigint[] NOT NULL DEFAULT '{}'::bigint[]
COLUMN partition_consumers.lease_id uuid
COLUMN partition_consumers.lease_expires_at timestamp with time zone
COLUMN partition_consumers.lease_seqs bigint[] NOT NULL DEFAULT '{}'::bigint[]
COLUMN partition_consumers.lease_failed bigint[] NOT NULL DEFAULT '{}'::bigint[]
COLUMN partition_consumers.last_leased_at timestamp with time zone
COLUMN partition_consumers.deliveries bigint NOT NULL DEFAULT 0
COLUMN partition_consumers.completed bigint NOT NULL DEFAULT 0
COLUMN partition_consumers.failures bigint NOT NULL DEFAULT 0
COLUMN partition_consumers.dead_letters bigint NOT NULL DEFAULT 0
COLUMN partition_consumers.created_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN partition_consumers.updated_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN partitions.id uuid NOT NULL DEFAULT gen_random_uuid()
COLUMN partitions.queue_id uuid NOT NULL
COLUMN partitions.name text COLLATE "C" NOT NULL
COLUMN partitions.last_seq bigint NOT NULL DEFAULT 0
COLUMN partitions.created_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN partitions.ready boolean NOT NULL DEFAULT true
COLUMN queue_delays.queue_id uuid NOT NULL
COLUMN queue_delays.delayed_processing integer NOT NULL DEFAULT 0
COLUMN queue_delays.window_buffer integer NOT NULL DEFAULT 0
COLUMN queue_options.queue_id uuid NOT NULL
COLUMN queue_options.retry_delay_ms integer NOT NULL DEFAULT 0
COLUMN queue_options.retry_delay_max_ms integer NOT NULL DEFAULT 0
COLUMN queue_options.max_size integer NOT NULL DEFAULT 0
COLUMN queue_options.priority integer NOT NULL DEFAULT 0
COLUMN queue_options.namespace text COLLATE "C" NOT NULL DEFAULT ''::text
COLUMN queue_options.task text COLLATE "C" NOT NULL DEFAULT ''::text
COLUMN queue_options.encryption_enabled boolean NOT NULL DEFAULT false
COLUMN queue_retention.queue_id uuid NOT NULL
COLUMN queue_retention.retention_seconds integer NOT NULL DEFAULT 0
COLUMN queue_retention.completed_retention_seconds integer NOT NULL DEFAULT 0
COLUMN queue_retention.retention_enabled boolean
COLUMN queue_retention.max_wait_time_seconds integer NOT NULL DEFAULT 0
COLUMN queue_retention.ttl integer NOT NULL DEFAULT 0
COLUMN queue_retention.updated_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN queues.id uuid NOT NULL DEFAULT gen_random_uuid()
COLUMN queues.name text COLLATE "C" NOT NULL
COLUMN queues.lease_time integer NOT NULL DEFAULT 300
COLUMN queues.retry_limit integer NOT NULL DEFAULT 3
COLUMN queues.created_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN queues.updated_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN queues.tenant_id uuid NOT NULL DEFAULT '00000000-0000-0000-0000-000000000001'::uuid
COLUMN schema_definitions.name text NOT NULL
COLUMN schema_definitions.checksum text NOT NULL
COLUMN schema_definitions.applied_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN schema_migrations.version integer NOT NULL
COLUMN schema_migrations.name text NOT NULL
COLUMN schema_migrations.checksum text NOT NULL
COLUMN schema_migrations.applied_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN sealed_messages.partition_id uuid NOT NULL
COLUMN sealed_messages.seq bigint NOT NULL
COLUMN sealed_timers.timer_id uuid NOT NULL
COLUMN shared_leases.partition_id uuid NOT NULL
COLUMN shared_leases.consumer_group text COLLATE "C" NOT NULL
COLUMN shared_leases.shared_id uuid NOT NULL
COLUMN shared_leases.lease_id uuid NOT NULL
COLUMN sweeper_shards.shard smallint NOT NULL
COLUMN sweeper_shards.last_swept_at timestamp with time zone
COLUMN sweeper_shards.swept_by text
COLUMN system_state.key text NOT NULL
COLUMN system_state.value jsonb NOT NULL
COLUMN system_state.updated_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN tenant_moves.tenant_id uuid NOT NULL
COLUMN tenant_moves.role text NOT NULL
COLUMN tenant_moves.peer text NOT NULL
COLUMN tenant_moves.step text NOT NULL
COLUMN tenant_moves.paused_at timestamp with time zone NOT NULL DEFAULT now()
COLUMN tenant_moves.updated_at timestamp with time zone NOT NULL DEFAULT now()

-- constraints
CONSTRAINT consumer_groups.consumer_groups_pkey PRIMARY KEY (queue_id, consumer_group)
CONSTRAINT consumer_groups.consumer_groups_queue_id_fkey FOREIGN KEY (queue_id) REFERENCES queen.queues(id) ON DELETE CASCADE
CONSTRAINT consumer_retry_at.consumer_retry_at_partition_id_consumer_group_fkey FOREIGN KEY (partition_id, consumer_group) REFERENCES queen.partition_consumers(partition_id, consumer_group) ON DELETE CASCADE
CONSTRAINT consumer_retry_at.consumer_retry_at_pkey PRIMARY KEY (partition_id, consumer_group)
CONSTRAINT kv.kv_pkey PRIMARY KEY (tenant_id, namespace, key)
CONSTRAINT kv_quota.kv_quota_pkey PRIMARY KEY (tenant_id)
CONSTRAINT kv_rate_bucket.kv_rate_bucket_pkey PRIMARY KEY (tenant, scope)
CONSTRAINT kv_rate_process.kv_rate_process_pkey PRIMARY KEY (process)
CONSTRAINT kv_usage.kv_usage_pkey PRIMARY KEY (tenant_id)
CONSTRAINT kv_usage_layout.kv_usage_layout_pages_check CHECK ((pages > 0))
CONSTRAINT kv_usage_layout.kv_usage_layout_pkey PRIMARY KEY (rel)
CONSTRAINT kv_usage_layout.kv_usage_layout_rel_check CHECK ((rel = ANY (ARRAY['kv'::text, 'timers'::text])))
CONSTRAINT kv_usage_layout.kv_usage_layout_slices_check CHECK ((slices > 0))
CONSTRAINT kv_usage_part.kv_usage_part_pkey PRIMARY KEY (rel, slice, tenant_id)
CONSTRAINT kv_usage_recent.kv_usage_recent_pkey PRIMARY KEY (rel, slice, tenant_id, created)
CONSTRAINT kv_usage_slice.kv_usage_slice_pkey PRIMARY KEY (rel, slice)
CONSTRAINT kv_usage_total.kv_usage_total_pkey PRIMARY KEY (tenant_id)
CONSTRAINT log_timers.log_timers_pkey PRIMARY KEY (timer_id)
CONSTRAINT message_failure_texts.message_failure_texts_partition_id_seq_fkey FOREIGN KEY (partition_id, seq) REFERENCES queen.messages(partition_id, seq) ON DELETE CASCADE
CONSTRAINT message_failure_texts.message_failure_texts_pkey PRIMARY KEY (partition_id, consumer_group, seq)
CONSTRAINT message_failures.message_failures_partition_id_seq_fkey FOREIGN KEY (partition_id, seq) REFERENCES queen.messages(partition_id, seq) ON DELETE CASCADE
CONSTRAINT message_failures.message_failures_pkey PRIMARY KEY (partition_id, consumer_group, seq)
CONSTRAINT message_traces.message_traces_partition_id_transaction_id_fkey FOREIGN KEY (partition_id, transaction_id) REFERENCES queen.messages(partition_id, transaction_id) ON DELETE CASCADE
CONSTRAINT message_traces.message_traces_pkey PRIMARY KEY (partition_id, transaction_id, n)
CONSTRAINT messages.messages_partition_id_fkey FOREIGN KEY (partition_id) REFERENCES queen.partitions(id) ON DELETE CASCADE
CONSTRAINT messages.messages_partition_id_transaction_id_key UNIQUE (partition_id, transaction_id)
CONSTRAINT messages.messages_pkey PRIMARY KEY (partition_id, seq)
CONSTRAINT partition_consumers.partition_consumers_partition_id_fkey FOREIGN KEY (partition_id) REFERENCES queen.partitions(id) ON DELETE CASCADE
CONSTRAINT partition_consumers.partition_consumers_pkey PRIMARY KEY (partition_id, consumer_group)
CONSTRAINT partitions.partitions_pkey PRIMARY KEY (id)
CONSTRAINT partitions.partitions_queue_id_fkey FOREIGN KEY (queue_id) REFERENCES queen.queues(id) ON DELETE CASCADE
CONSTRAINT partitions.partitions_queue_id_name_key UNIQUE (queue_id, name)
CONSTRAINT queue_delays.queue_delays_delayed_processing_check CHECK (((delayed_processing >= 0) AND (delayed_processing <= 86400)))
CONSTRAINT queue_delays.queue_delays_pkey PRIMARY KEY (queue_id)
CONSTRAINT queue_delays.queue_delays_queue_id_fkey FOREIGN KEY (queue_id) REFERENCES queen.queues(id) ON DELETE CASCADE
CONSTRAINT queue_delays.queue_delays_window_buffer_check CHECK (((window_buffer >= 0) AND (window_buffer <= 86400)))
CONSTRAINT queue_options.queue_options_max_size_check CHECK ((max_size >= 0))
CONSTRAINT queue_options.queue_options_pkey PRIMARY KEY (queue_id)
CONSTRAINT queue_options.queue_options_queue_id_fkey FOREIGN KEY (queue_id) REFERENCES queen.queues(id) ON DELETE CASCADE
CONSTRAINT queue_options.queue_options_retry_delay_max_ms_check CHECK (((retry_delay_max_ms >= 0) AND (retry_delay_max_ms <= 86400000)))
CONSTRAINT queue_options.queue_options_retry_delay_ms_check CHECK (((retry_delay_ms >= 0) AND (retry_delay_ms <= 86400000)))
CONSTRAINT queue_retention.queue_retention_completed_retention_seconds_check CHECK (((completed_retention_seconds >= 0) AND (completed_retention_seconds <= 315360000)))
CONSTRAINT queue_retention.queue_retention_max_wait_time_seconds_check CHECK (((max_wait_time_seconds >= 0) AND (max_wait_time_seconds <= 315360000)))
CONSTRAINT queue_retention.queue_retention_pkey PRIMARY KEY (queue_id)
CONSTRAINT queue_retention.queue_retention_queue_id_fkey FOREIGN KEY (queue_id) REFERENCES queen.queues(id) ON DELETE CASCADE
CONSTRAINT queue_retention.queue_retention_retention_seconds_check CHECK (((retention_seconds >= 0) AND (retention_seconds <= 315360000)))
CONSTRAINT queue_retention.queue_retention_ttl_check CHECK (((ttl >= 0) AND (ttl <= 315360000)))
CONSTRAINT queues.queues_lease_time_check CHECK ((lease_time > 0))
CONSTRAINT queues.queues_pkey PRIMARY KEY (id)
CONSTRAINT queues.queues_retry_limit_check CHECK ((retry_limit >= 0))
CONSTRAINT queues.queues_tenant_id_name_key UNIQUE (tenant_id, name)
CONSTRAINT schema_definitions.schema_definitions_pkey PRIMARY KEY (name)
CONSTRAINT schema_migrations.schema_migrations_pkey PRIMARY KEY (version)
CONSTRAINT sealed_messages.sealed_messages_partition_id_seq_fkey FOREIGN KEY (partition_id, seq) REFERENCES queen.messages(partition_id, seq) ON DELETE CASCADE
CONSTRAINT sealed_messages.sealed_messages_pkey PRIMARY KEY (partition_id, seq)
CONSTRAINT sealed_timers.sealed_timers_pkey PRIMARY KEY (timer_id)
CONSTRAINT shared_leases.shared_leases_partition_id_consumer_group_fkey FOREIGN KEY (partition_id, consumer_group) REFERENCES queen.partition_consumers(partition_id, consumer_group) ON DELETE CASCADE
CONSTRAINT shared_leases.shared_leases_pkey PRIMARY KEY (partition_id, consumer_group)
CONSTRAINT sweeper_shards.sweeper_shards_pkey PRIMARY KEY (shard)
CONSTRAINT sweeper_shards.sweeper_shards_shard_check CHECK (((shard >= 0) AND (shard <= 63)))
CONSTRAINT system_state.system_state_pkey PRIMARY KEY (key)
CONSTRAINT tenant_moves.tenant_moves_pkey PRIMARY KEY (tenant_id)
CONSTRAINT tenant_moves.tenant_moves_role_check CHECK ((role = ANY (ARRAY['source'::text, 'target'::text, 'moved'::text])))

-- indexes
CREATE UNIQUE INDEX consumer_groups_pkey ON queen.consumer_groups USING btree (queue_id, consumer_group)
CREATE UNIQUE INDEX consumer_retry_at_pkey ON queen.consumer_retry_at USING btree (partition_id, consumer_group)
CREATE INDEX idx_kv_shard_expires ON queen.kv USING btree (shard, expires_at) WHERE (expires_at IS NOT NULL)
CREATE INDEX idx_log_timers_due ON queen.log_timers USING btree (deliver_at, timer_id)
CREATE INDEX idx_log_timers_shard_due ON queen.log_timers USING btree (shard, deliver_at, timer_id)
CREATE INDEX idx_log_timers_tenant_due ON queen.log_timers USING btree (tenant_id, deliver_at, timer_id)
CREATE UNIQUE INDEX idx_log_timers_tenant_key ON queen.log_timers USING btree (tenant_id, timer_key) WHERE (timer_key IS NOT NULL)
CREATE INDEX idx_message_failures_dead_letters ON queen.message_failures USING btree (partition_id, consumer_group, seq) WHERE (dead_lettered_at IS NOT NULL)
CREATE INDEX idx_partition_consumers_lease ON queen.partition_consumers USING btree (partition_id) WHERE false
CREATE INDEX idx_partitions_ready ON queen.partitions USING btree (queue_id) WHERE ready
CREATE INDEX idx_queue_options_namespace ON queen.queue_options USING btree (namespace, task) WHERE ((namespace <> ''::text) OR (task <> ''::text))
CREATE INDEX idx_shared_leases_shared_id ON queen.shared_leases USING btree (shared_id)
CREATE UNIQUE INDEX kv_pkey ON queen.kv USING btree (tenant_id, namespace, key)
CREATE UNIQUE INDEX kv_quota_pkey ON queen.kv_quota USING btree (tenant_id)
CREATE UNIQUE INDEX kv_rate_bucket_pkey ON queen.kv_rate_bucket USING btree (tenant, scope)
CREATE UNIQUE INDEX kv_rate_process_pkey ON queen.kv_rate_process USING btree (process)
CREATE UNIQUE INDEX kv_usage_layout_pkey ON queen.kv_usage_layout USING btree (rel)
CREATE UNIQUE INDEX kv_usage_part_pkey ON queen.kv_usage_part USING btree (rel, slice, tenant_id)
CREATE UNIQUE INDEX kv_usage_pkey ON queen.kv_usage USING btree (tenant_id)
CREATE UNIQUE INDEX kv_usage_recent_pkey ON queen.kv_usage_recent USING btree (rel, slice, tenant_id, created)
CREATE UNIQUE INDEX kv_usage_slice_pkey ON queen.kv_usage_slice USING btree (rel, slice)
CREATE UNIQUE INDEX kv_usage_total_pkey ON queen.kv_usage_total USING btree (tenant_id)
CREATE UNIQUE INDEX log_timers_pkey ON queen.log_timers USING btree (timer_id)
CREATE UNIQUE INDEX message_failure_texts_pkey ON queen.message_failure_texts USING btree (partition_id, consumer_group, seq)
CREATE UNIQUE INDEX message_failures_pkey ON queen.message_failures USING btree (partition_id, consumer_group, seq)
CREATE UNIQUE INDEX message_traces_pkey ON queen.message_traces USING btree (partition_id, transaction_id, n)
CREATE UNIQUE INDEX messages_partition_id_transaction_id_key ON queen.messages USING btree (partition_id, transaction_id)
CREATE UNIQUE INDEX messages_pkey ON queen.messages USING btree (partition_id, seq)
CREATE UNIQUE INDEX partition_consumers_pkey ON queen.partition_consumers USING btree (partition_id, consumer_group)
CREATE UNIQUE INDEX partitions_pkey ON queen.partitions USING btree (id)
CREATE UNIQUE INDEX partitions_queue_id_name_key ON queen.partitions USING btree (queue_id, name)
CREATE UNIQUE INDEX queue_delays_pkey ON queen.queue_delays USING btree (queue_id)
CREATE UNIQUE INDEX queue_options_pkey ON queen.queue_options USING btree (queue_id)
CREATE UNIQUE INDEX queue_retention_pkey ON queen.queue_retention USING btree (queue_id)
CREATE UNIQUE INDEX queues_pkey ON queen.queues USING btree (id)
CREATE UNIQUE INDEX queues_tenant_id_name_key ON queen.queues USING btree (tenant_id, name)
CREATE UNIQUE INDEX schema_definitions_pkey ON queen.schema_definitions USING btree (name)
CREATE UNIQUE INDEX schema_migrations_pkey ON queen.schema_migrations USING btree (version)
CREATE UNIQUE INDEX sealed_messages_pkey ON queen.sealed_messages USING btree (partition_id, seq)
CREATE UNIQUE INDEX sealed_timers_pkey ON queen.sealed_timers USING btree (timer_id)
CREATE UNIQUE INDEX shared_leases_pkey ON queen.shared_leases USING btree (partition_id, consumer_group)
CREATE UNIQUE INDEX sweeper_shards_pkey ON queen.sweeper_shards USING btree (shard)
CREATE UNIQUE INDEX system_state_pkey ON queen.system_state USING btree (key)
CREATE UNIQUE INDEX tenant_moves_pkey ON queen.tenant_moves USING btree (tenant_id)

-- sequences
SEQUENCE kv_version_seq bigint cache 1000

-- functions
CREATE OR REPLACE FUNCTION queen.array_length_v1(p_array jsonb, p_code text, p_message text, p_index integer, p_max bigint DEFAULT NULL::bigint, p_big_code text DEFAULT NULL::text, p_big_message text DEFAULT NULL::text)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  IF jsonb_typeof(p_array) IS DISTINCT FROM 'array' OR jsonb_array_length(p_array) = 0 THEN
    PERFORM queen.fail_v1(p_code, p_message, p_index);
  END IF;
  IF jsonb_array_length(p_array) > p_max THEN
    PERFORM queen.fail_v1(p_big_code, format(p_big_message, jsonb_array_length(p_array), p_max), NULL);
  END IF;
  RETURN jsonb_array_length(p_array);
END $function$
CREATE OR REPLACE FUNCTION queen.check_name_v1(p_name text, p_code text, p_what text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
  IF p_name IS NULL OR NOT queen.name_ok_v1(p_name) THEN
    PERFORM queen.fail_v1(p_code, p_what || ' is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
END $function$
CREATE OR REPLACE FUNCTION queen.console_login_v1(p_peer text, p_failed boolean, p_limit integer, p_window_seconds integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_now TIMESTAMPTZ := clock_timestamp();
  v_window INTERVAL := make_interval(secs => p_window_seconds);
  v_count DOUBLE PRECISION;
  v_since TIMESTAMPTZ;
BEGIN
  SELECT b.tokens, b.at INTO v_count, v_since FROM queen.kv_rate_bucket b
   WHERE b.tenant = p_peer AND b.scope = 'console_login' AND b.at > v_now - v_window;
  IF v_count >= p_limit THEN
    RETURN jsonb_build_object('refused', true, 'retryAfterSeconds', greatest(1, ceil(extract(epoch FROM v_since + v_window - v_now)))::int);
  END IF;
  IF p_failed THEN
    IF v_count IS NULL THEN
      DELETE FROM queen.kv_rate_bucket WHERE ctid IN (
        SELECT ctid FROM queen.kv_rate_bucket WHERE scope = 'console_login' AND at <= v_now - v_window LIMIT 1000 FOR UPDATE SKIP LOCKED);
      IF (SELECT count(*) FROM (SELECT 1 FROM queen.kv_rate_bucket WHERE scope = 'console_login' LIMIT 10000) n) >= 10000 THEN
        DELETE FROM queen.kv_rate_bucket WHERE scope = 'console_login';
      END IF;
    END IF;
    INSERT INTO queen.kv_rate_bucket AS b (tenant, scope, tokens, at) VALUES (p_peer, 'console_login', 1, v_now)
    ON CONFLICT (tenant, scope) DO UPDATE
       SET tokens = CASE WHEN b.at <= v_now - v_window THEN 1 ELSE b.tokens + 1 END,
           at = CASE WHEN b.at <= v_now - v_window THEN v_now ELSE b.at END;
  END IF;
  RETURN jsonb_build_object('refused', false);
END $function$
CREATE OR REPLACE FUNCTION queen.fail_v1(p_code text, p_message text, p_index integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QK400', MESSAGE = p_message,
    DETAIL = jsonb_build_object('code', p_code, 'index', p_index)::text;
END $function$
CREATE OR REPLACE FUNCTION queen.json_kind_v1(p jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE jsonb_typeof(p) WHEN 'object' THEN 'an object' WHEN 'array' THEN 'an array' WHEN 'string' THEN 'a string'
           WHEN 'number' THEN 'a number' WHEN 'boolean' THEN 'a boolean' WHEN 'null' THEN 'null' ELSE 'nothing' END
$function$
CREATE OR REPLACE FUNCTION queen.kv_apply_at_v1(p_tenant uuid, p_ops jsonb, p_in_transaction boolean, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_n INT;
  v_norm JSONB[] := '{}';
  v_op JSONB;
  v_answer JSONB;
  v_dup INT;
  v_prefix_dup INT;
  v_has_prefix BOOLEAN := false;
  v_required BOOLEAN := false;
  v_lone_required BOOLEAN;
  v_verdict TEXT;
  i INT;
BEGIN
  -- One plainly valid operation: nothing to sort, no duplicate to find. A `required` put,
  -- putIfAbsent or incr (the once-marker of a bundle) takes the fast path too: a lone write that
  -- loses wrote nothing (a live key there, a bound crossed), so its verdict needs no sub-block to
  -- undo anything. Not a delete: one over an expired row removes it and answers not applied, a
  -- write the general path rolls back.
  IF jsonb_typeof(p_ops) = 'array' AND jsonb_array_length(p_ops) = 1 AND jsonb_typeof(p_ops->0) = 'object' THEN
    v_op := p_ops->0;
    v_lone_required := jsonb_typeof(v_op->'required') = 'boolean' AND jsonb_typeof(v_op->'op') = 'string'
                       AND v_op->>'op' IN ('put', 'putIfAbsent', 'incr');
    v_answer := queen.kv_apply_fast_v1(p_tenant,
      CASE WHEN jsonb_typeof(v_op->'op') = 'string' THEN v_op->>'op' END,
      CASE WHEN jsonb_typeof(v_op->'ns') = 'string' THEN v_op->>'ns' END,
      -- '' for a key that is there but not a string: no fast path takes it.
      CASE WHEN jsonb_typeof(v_op->'key') = 'string' THEN v_op->>'key' WHEN v_op ? 'key' THEN '' END,
      CASE WHEN v_lone_required THEN v_op - 'required' ELSE v_op END, p_now, true);
    IF v_answer IS NOT NULL THEN
      IF v_lone_required AND (v_op->>'required')::boolean AND NOT (v_answer->>'applied')::boolean THEN
        RETURN queen.kv_verdict_v1(v_answer);
      END IF;
      RETURN jsonb_build_array(v_answer);
    END IF;
  END IF;
  v_n := queen.array_length_v1(p_ops, 'kv_operations_required', 'operations must be a non-empty array of KV operations.', NULL,
    queen.limit_v1('kv_max_batch'), 'kv_batch_too_large', 'The batch has %s operations; at most %s are allowed.');

  FOR i IN 0 .. v_n - 1 LOOP
    v_op := p_ops->i;
    v_norm := v_norm || coalesce(queen.kv_fast_check_op_v1(v_op, i, p_now), queen.kv_check_op_v1(v_op, i, p_in_transaction, p_now));
    v_has_prefix := v_has_prefix OR v_norm[i + 1]->>'kind' = 'getPrefix';
    v_required := v_required OR coalesce((v_norm[i + 1]->>'required')::boolean, false);
  END LOOP;

  -- A batch touches a key at most once, so there is no intra-batch order to reason about.
  IF v_n > 1 OR v_norm[1] ? 'keys' THEN
    SELECT t.idx INTO v_dup FROM (
      SELECT idx, row_number() OVER (PARTITION BY ns, key ORDER BY idx) AS nth FROM (
        SELECT (o->>'i')::int AS idx, o->>'ns' AS ns, o->>'key' AS key FROM unnest(v_norm) o WHERE o ? 'key'
        UNION ALL
        SELECT (o->>'i')::int, o->>'ns', k FROM unnest(v_norm) o, jsonb_array_elements_text(o->'keys') k WHERE o ? 'keys'
      ) touched
    ) t WHERE t.nth > 1 ORDER BY t.idx LIMIT 1;
    -- A getPrefix touches every key of its range too. The reads of a prefix run after the batch's
    -- single-key operations (the lock order), so a getPrefix at index 0 answered with what a put at
    -- index 1 wrote: an intra-batch order after all. A write in the range [prefix, ...) past
    -- `after` is refused; reads beside it (a get or getMany of a key in the range) have no order
    -- between them and stay allowed.
    IF v_has_prefix THEN
      SELECT greatest(p.idx, t.idx) INTO v_prefix_dup FROM (
        SELECT (o->>'i')::int AS idx, o->>'ns' AS ns, o->>'prefix' AS prefix, o->>'after' AS after
          FROM unnest(v_norm) o WHERE o->>'kind' = 'getPrefix'
      ) p JOIN (
        SELECT (o->>'i')::int AS idx, o->>'ns' AS ns, o->>'key' AS key FROM unnest(v_norm) o
         WHERE o->>'kind' IN ('put', 'delete', 'incr')
      ) t ON t.ns = p.ns AND starts_with(t.key, p.prefix) AND (p.after IS NULL OR t.key COLLATE "C" > p.after COLLATE "C")
      ORDER BY 1 LIMIT 1;
      v_dup := least(v_dup, v_prefix_dup);
    END IF;
    IF v_dup IS NOT NULL THEN
      PERFORM queen.fail_v1('kv_duplicate_key', format(
        'Operation %s touches a key that an earlier operation of this batch already touches; a batch touches a key at most once.', v_dup), v_dup);
    END IF;
  END IF;

  -- Unconditional puts only: one set-based upsert (kv_put_many_v1) answers them all.
  IF v_n > 1 AND queen.kv_fast_path_v1()
     AND NOT v_required AND NOT EXISTS (SELECT 1 FROM unnest(v_norm) o WHERE o->>'kind' <> 'put' OR o ? 'expect') THEN
    RETURN queen.kv_put_many_v1(p_tenant, v_norm, p_now);
  END IF;

  IF NOT v_required THEN
    RETURN queen.kv_run_v1(p_tenant, v_norm, p_now);
  END IF;
  -- A sub-block with a handler is a subtransaction: a lost `required` raises inside it
  -- (kv_run_v1), the handler undoes every write the call made and answers the verdict. An error
  -- caught here is never reported to the server's log. Only batches with a `required` pay for it.
  BEGIN
    RETURN queen.kv_run_v1(p_tenant, v_norm, p_now);
  EXCEPTION WHEN SQLSTATE 'QK409' THEN
    GET STACKED DIAGNOSTICS v_verdict = PG_EXCEPTION_DETAIL;
    RETURN v_verdict::jsonb;
  END;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_apply_fast_v1(p_tenant uuid, p_op text, p_ns text, p_key text, p_rest jsonb, p_now timestamp with time zone, p_whole boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF NOT coalesce(queen.name_ok_v1(p_ns), false)
     OR jsonb_typeof(p_rest) IS DISTINCT FROM 'object'
     OR NOT queen.kv_fast_path_v1() THEN
    RETURN NULL;
  END IF;
  IF p_whole THEN
    p_rest := p_rest - '{op,ns,key}'::text[];
  END IF;
  IF p_op = 'getMany' THEN
    -- The keys: 1 to kv_max_batch distinct keys.
    RETURN CASE WHEN p_key IS NULL AND jsonb_typeof(p_rest->'keys') = 'array' AND (p_rest - 'keys') = '{}'::jsonb
                THEN (SELECT a FROM queen.kv_get_many_v1(p_tenant, 0, p_ns, p_rest->'keys', p_now) a
                       WHERE (SELECT count(*) BETWEEN 1 AND queen.limit_v1('kv_max_batch')
                                     AND bool_and(jsonb_typeof(k) = 'string' AND queen.kv_key_ok_v1(k #>> '{}'))
                                     AND count(DISTINCT k) = count(*)
                                FROM jsonb_array_elements(p_rest->'keys') k)) END;
  END IF;
  IF NOT coalesce(queen.kv_key_ok_v1(p_key), false) THEN
    RETURN NULL;
  END IF;
  -- The guards are kv_checks.sql's, the ones the batch fast check runs.
  IF p_op = 'get' THEN
    RETURN CASE WHEN p_rest = '{}'::jsonb THEN (SELECT a FROM queen.kv_get_key_v1(p_tenant, 0, p_ns, p_key, p_now) a) END;
  END IF;
  IF p_op = 'delete' THEN
    RETURN CASE WHEN p_rest = '{}'::jsonb THEN queen.kv_delete_key_v1(p_tenant, 0, p_op, p_ns, p_key, NULL, p_now) END;
  END IF;
  IF p_op IN ('put', 'putIfAbsent') THEN
    RETURN CASE WHEN queen.kv_plain_put_v1(p_rest, '{}')
                THEN queen.kv_put_key_v1(p_tenant, 0, p_op, p_ns, p_key, p_rest->'value', queen.kv_expires_at_v1(p_rest->'ttlSeconds', p_now),
                       CASE WHEN p_op = 'putIfAbsent' THEN 0 END, p_now) END;
  END IF;
  IF p_op = 'incr' THEN
    RETURN CASE WHEN queen.kv_plain_incr_v1(p_rest)
                THEN queen.kv_incr_key_v1(p_tenant, 0, p_op, p_ns, p_key, coalesce((p_rest->>'delta')::numeric, 1),
                       (p_rest->>'min')::numeric, (p_rest->>'max')::numeric, queen.kv_expires_at_v1(p_rest->'ttlSeconds', p_now), p_now) END;
  END IF;
  RETURN NULL;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_apply_one_v1(p_tenant uuid, p_op text, p_ns text, p_key text, p_body jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT coalesce(queen.tenant_gate_v1(p_tenant),
                  queen.kv_apply_fast_v1(p_tenant, p_op, p_ns, p_key, p_body, clock_timestamp(), false),
                  ('[]'::jsonb || queen.kv_apply_at_v1(p_tenant, jsonb_build_array(jsonb_build_object('op', p_op, 'ns', p_ns, 'key', p_key) || p_body),
                                                       false, clock_timestamp())) -> 0)
$function$
CREATE OR REPLACE FUNCTION queen.kv_apply_v1(p_tenant uuid, p_ops jsonb, p_in_transaction boolean DEFAULT false)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT coalesce(
    queen.tenant_gate_v1(p_tenant),
    -- A lone operation with `required` (a bundle's once-marker) goes straight to kv_apply_at_v1,
    -- whose fast path takes it with its verdict: this one would only decline it, after its checks.
    CASE WHEN jsonb_typeof(p_ops) = 'array' AND p_ops->1 IS NULL AND NOT coalesce(p_ops->0 ? 'required', false) THEN
      nullif(jsonb_build_array(queen.kv_apply_fast_v1(p_tenant,
        CASE WHEN jsonb_typeof(p_ops->0->'op') = 'string' THEN p_ops->0->>'op' END,
        CASE WHEN jsonb_typeof(p_ops->0->'ns') = 'string' THEN p_ops->0->>'ns' END,
        CASE WHEN jsonb_typeof(p_ops->0->'key') = 'string' THEN p_ops->0->>'key' WHEN p_ops->0 ? 'key' THEN '' END,
        p_ops->0, clock_timestamp(), true)), '[null]'::jsonb) END,
    queen.kv_apply_at_v1(p_tenant, p_ops, p_in_transaction, clock_timestamp()))
$function$
CREATE OR REPLACE FUNCTION queen.kv_check_key_v1(p_key jsonb, p_index integer)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
  IF p_key IS NULL OR p_key = 'null'::jsonb OR p_key = '""'::jsonb THEN
    PERFORM queen.fail_v1('kv_key_required', format('Operation %s needs key, 1 to %s bytes of UTF-8.', p_index, queen.kv_max_key_bytes_v1()), p_index);
  END IF;
  IF jsonb_typeof(p_key) <> 'string' THEN
    PERFORM queen.fail_v1('kv_invalid_key', format('Operation %s: a key is a string, got %s.', p_index, queen.json_kind_v1(p_key)), p_index);
  END IF;
  IF NOT queen.kv_key_ok_v1(p_key #>> '{}') THEN
    PERFORM queen.fail_v1('kv_key_too_long', format('Operation %s: the key is %s bytes of UTF-8; at most %s are allowed.',
      p_index, octet_length(p_key #>> '{}'), queen.kv_max_key_bytes_v1()), p_index);
  END IF;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_check_op_v1(p_op jsonb, p_index integer, p_in_transaction boolean, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_name TEXT;
  v_kind TEXT;
  v_ns JSONB;
  v_out JSONB;
  v_key JSONB;
  v_ttl JSONB;
  v_forever JSONB;
  v_has_ttl BOOLEAN;
  v_is_forever BOOLEAN;
  v_expect JSONB;
  v_limit JSONB;
  v_limit_n NUMERIC;
  v_prefix_limit INT := queen.limit_v1('kv_prefix_limit');
  v_max_batch INT := queen.limit_v1('kv_max_batch');
  v_min JSONB;
  v_max JSONB;
  v_fields TEXT[];
  v_unknown JSONB;
BEGIN
  IF jsonb_typeof(p_op) IS DISTINCT FROM 'object' THEN
    PERFORM queen.fail_v1('kv_unknown_op', format('Operation %s is not a JSON object.', p_index), p_index);
  END IF;
  v_name := CASE WHEN jsonb_typeof(p_op->'op') = 'string' THEN p_op->>'op' END;
  v_kind := CASE v_name
    WHEN 'get' THEN 'get' WHEN 'getMany' THEN 'getMany' WHEN 'getPrefix' THEN 'getPrefix'
    WHEN 'put' THEN 'put' WHEN 'putIfAbsent' THEN 'put' WHEN 'delete' THEN 'delete' WHEN 'incr' THEN 'incr' END;
  IF v_kind IS NULL THEN
    PERFORM queen.fail_v1('kv_unknown_op', format(
      'Operation %s has %s; it must be one of get, getMany, getPrefix, put, putIfAbsent, delete, incr.',
      p_index, CASE WHEN p_op ? 'op' THEN 'an op that is none of these' ELSE 'no op' END), p_index);
  END IF;

  v_ns := p_op->'ns';
  IF v_ns IS NULL OR v_ns = 'null'::jsonb OR v_ns = '""'::jsonb THEN
    PERFORM queen.fail_v1('kv_ns_required', format('Operation %s needs ns, the namespace.', p_index), p_index);
  END IF;
  IF jsonb_typeof(v_ns) <> 'string' OR NOT queen.name_ok_v1(v_ns #>> '{}') THEN
    PERFORM queen.fail_v1('kv_invalid_namespace', format(
      'Operation %s: ns is %s that is not a namespace; a namespace is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.',
      p_index, queen.json_kind_v1(v_ns)), p_index);
  END IF;
  v_out := jsonb_build_object('i', p_index, 'op', v_name, 'kind', v_kind, 'ns', v_ns);

  -- A field the operation does not take is refused, never ignored: a misspelled `expect` (expct,
  -- Expect) ignored is an unconditional write where a fence was meant, and nothing would say so.
  -- v_fields: what docs/kv.md gives each op; the fields after them are refused further down
  -- with a sentence of their own (required on a read, expect on putIfAbsent and incr, value on incr).
  v_fields := CASE v_name
    WHEN 'get' THEN '{ns,key}' WHEN 'getMany' THEN '{ns,keys}' WHEN 'getPrefix' THEN '{ns,prefix,limit,after}'
    WHEN 'put' THEN '{ns,key,value,ttlSeconds,forever,expect,required}'
    WHEN 'putIfAbsent' THEN '{ns,key,value,ttlSeconds,forever,required}'
    WHEN 'delete' THEN '{ns,key,expect,required}'
    WHEN 'incr' THEN '{ns,key,delta,min,max,ttlSeconds,forever,required}' END;
  v_unknown := p_op - v_fields - CASE v_kind WHEN 'incr' THEN '{op,value,expect}' WHEN 'put' THEN '{op,expect}' ELSE '{op,required}' END::text[];
  IF v_unknown <> '{}'::jsonb THEN
    PERFORM queen.fail_v1('kv_invalid_field', format(
      'Operation %s (%s) has a field %s does not take: %s. Its fields are op, %s.', p_index, v_name, v_name,
      (SELECT string_agg(left(f, 64), ', ' ORDER BY f) FROM jsonb_object_keys(v_unknown) f), array_to_string(v_fields, ', ')), p_index);
  END IF;

  IF p_op ? 'required' AND jsonb_typeof(p_op->'required') <> 'boolean' THEN
    PERFORM queen.fail_v1('kv_invalid_field', format('Operation %s: required must be true or false.', p_index), p_index);
  END IF;
  IF v_kind IN ('get', 'getMany', 'getPrefix') AND p_op ? 'required' THEN
    PERFORM queen.fail_v1('kv_invalid_field', format(
      'Operation %s: required applies to writes only; a read has no precondition to lose.', p_index), p_index);
  END IF;

  -- The key of single-key operations.
  IF v_kind IN ('get', 'put', 'delete', 'incr') THEN
    v_key := p_op->'key';
    PERFORM queen.kv_check_key_v1(v_key, p_index);
    v_out := v_out || jsonb_build_object('key', v_key);
  END IF;

  IF v_kind = 'getMany' THEN
    IF jsonb_typeof(p_op->'keys') IS DISTINCT FROM 'array' OR jsonb_array_length(p_op->'keys') = 0 THEN
      PERFORM queen.fail_v1('kv_key_required', format('Operation %s (getMany) needs keys, a non-empty array of keys.', p_index), p_index);
    END IF;
    IF jsonb_array_length(p_op->'keys') > v_max_batch THEN
      PERFORM queen.fail_v1('kv_batch_too_large', format(
        'Operation %s asks for %s keys; at most %s keys are read in one call.', p_index, jsonb_array_length(p_op->'keys'), v_max_batch), p_index);
    END IF;
    FOR v_key IN SELECT k FROM jsonb_array_elements(p_op->'keys') k LOOP
      PERFORM queen.kv_check_key_v1(v_key, p_index);
    END LOOP;
    RETURN v_out || jsonb_build_object('keys', p_op->'keys');
  END IF;

  IF v_kind = 'getPrefix' THEN
    IF p_in_transaction THEN
      PERFORM queen.fail_v1('kv_get_prefix_not_allowed_in_transaction', format(
        'Operation %s: getPrefix is unbounded read work and is not allowed inside a transaction; use POST /api/v1/kv.', p_index), p_index);
    END IF;
    IF jsonb_typeof(p_op->'prefix') IS DISTINCT FROM 'string' OR p_op->>'prefix' = '' THEN
      PERFORM queen.fail_v1('kv_prefix_required', format(
        'Operation %s (getPrefix) needs a non-empty prefix; a namespace is not a table to enumerate.', p_index), p_index);
    END IF;
    IF octet_length(p_op->>'prefix') > queen.kv_max_key_bytes_v1() THEN
      PERFORM queen.fail_v1('kv_key_too_long', format('Operation %s: the prefix is longer than %s bytes, the longest key.',
        p_index, queen.kv_max_key_bytes_v1()), p_index);
    END IF;
    v_limit := p_op->'limit';
    IF v_limit IS NULL OR v_limit = 'null'::jsonb THEN
      v_limit_n := 100;
    ELSIF jsonb_typeof(v_limit) = 'number' THEN
      v_limit_n := floor(v_limit::numeric);
    ELSE
      PERFORM queen.fail_v1('kv_invalid_field', format('Operation %s: limit must be a number.', p_index), p_index);
    END IF;
    -- Clamped, never refused: a 400 on a high limit is an error the caller cannot fix without
    -- reading the server's configuration.
    v_limit_n := least(greatest(v_limit_n, 1), v_prefix_limit);
    IF p_op ? 'after' AND p_op->'after' <> 'null'::jsonb AND jsonb_typeof(p_op->'after') <> 'string' THEN
      PERFORM queen.fail_v1('kv_invalid_field', format('Operation %s: after must be a key (a string) or null.', p_index), p_index);
    END IF;
    RETURN v_out || jsonb_build_object('prefix', p_op->'prefix', 'limit', v_limit_n,
                                       'after', coalesce(p_op->'after', 'null'::jsonb));
  END IF;

  IF v_kind = 'get' THEN
    RETURN v_out;
  END IF;

  v_out := v_out || jsonb_build_object('required', coalesce(p_op->'required', 'false'::jsonb));

  -- Exactly one expiry on put, putIfAbsent and incr.
  IF v_kind IN ('put', 'incr') THEN
    v_ttl := p_op->'ttlSeconds';
    v_forever := p_op->'forever';
    IF v_forever IS NOT NULL AND jsonb_typeof(v_forever) NOT IN ('boolean', 'null') THEN
      PERFORM queen.fail_v1('kv_invalid_field', format('Operation %s: forever must be true when given.', p_index), p_index);
    END IF;
    v_has_ttl := v_ttl IS NOT NULL AND v_ttl <> 'null'::jsonb;
    -- coalesce: without it an absent forever makes this NULL, `false = NULL` is NULL, and a write
    -- with neither expiry would slip past the check below and be stored forever.
    v_is_forever := coalesce(v_forever = 'true'::jsonb, false);
    IF v_has_ttl = v_is_forever THEN
      PERFORM queen.fail_v1('kv_expiry_not_specified', format(
        'Operation %s (%s) needs exactly one of ttlSeconds (a whole number above zero) or forever: true; it has %s.',
        p_index, v_name, CASE WHEN v_has_ttl THEN 'both' ELSE 'neither' END), p_index);
    END IF;
    IF v_has_ttl THEN
      IF jsonb_typeof(v_ttl) <> 'number' OR v_ttl::numeric <> trunc(v_ttl::numeric)
         OR v_ttl::numeric <= 0 OR v_ttl::numeric > queen.kv_max_ttl_seconds_v1() THEN
        PERFORM queen.fail_v1('kv_invalid_ttl', format(
          'Operation %s: ttlSeconds must be a whole number of seconds from 1 to %s (100 years), got %s.',
          p_index, queen.kv_max_ttl_seconds_v1(), queen.json_kind_v1(v_ttl)), p_index);
      END IF;
      v_out := v_out || jsonb_build_object('expiresAt', queen.kv_expires_at_v1(v_ttl, p_now));
    ELSE
      v_out := v_out || jsonb_build_object('expiresAt', NULL);
    END IF;
  END IF;

  -- expect: absent (unconditional), 0 (must not exist), N (optimistic lock). Present but null is a
  -- client bug, never a downgrade to an upsert: writing the word declares the intent to fence.
  IF p_op ? 'expect' THEN
    v_expect := p_op->'expect';
    IF v_name = 'putIfAbsent' THEN
      PERFORM queen.fail_v1('kv_expect_invalid', format(
        'Operation %s: putIfAbsent is put with expect: 0 and takes no expect of its own.', p_index), p_index);
    ELSIF v_kind = 'incr' THEN
      PERFORM queen.fail_v1('kv_expect_invalid', format(
        'Operation %s: incr has no expect, deliberately: it exists to remove the compare-and-set loop.', p_index), p_index);
    ELSIF jsonb_typeof(v_expect) IS DISTINCT FROM 'number' OR v_expect::numeric <> trunc(v_expect::numeric)
       OR v_expect::numeric < 0 OR v_expect::numeric > 9223372036854775807 THEN
      PERFORM queen.fail_v1('kv_expect_invalid', format(
        'Operation %s: expect must be 0 (must not exist) or a version; got %s. To write unconditionally, leave expect out.',
        p_index, queen.json_kind_v1(v_expect)), p_index);
    ELSIF v_kind = 'delete' AND v_expect::numeric = 0 THEN
      PERFORM queen.fail_v1('kv_expect_invalid', format(
        'Operation %s: a delete with expect: 0 could only delete nothing; give the version to fence on.', p_index), p_index);
    END IF;
    -- Normalised to an integer: JSON has one number type, so 12.0 is the version 12 (the check above
    -- accepts it as whole). Kept as sent, its text '12.0' would fail the ::bigint cast that runs
    -- the operation, and a valid fenced write would be refused as invalid_json.
    v_out := v_out || jsonb_build_object('expect', v_expect::numeric::bigint);
  ELSIF v_name = 'putIfAbsent' THEN
    v_out := v_out || jsonb_build_object('expect', 0);
  END IF;

  IF v_kind = 'put' THEN
    IF NOT p_op ? 'value' THEN
      PERFORM queen.fail_v1('kv_value_required', format(
        'Operation %s (%s) needs value; null is a legal value and must be written out.', p_index, v_name), p_index);
    END IF;
    IF NOT queen.kv_value_ok_v1(p_op->'value') THEN
      PERFORM queen.fail_v1('kv_value_too_large', format('Operation %s: the value is %s bytes as stored; at most %s bytes are allowed.',
        p_index, octet_length((p_op->'value')::text), queen.kv_max_value_bytes_v1()), p_index);
    END IF;
    RETURN v_out || jsonb_build_object('value', p_op->'value');
  END IF;

  IF v_kind = 'incr' THEN
    IF p_op ? 'value' THEN
      PERFORM queen.fail_v1('kv_invalid_field', format(
        'Operation %s: incr takes delta, not value; a missing or expired counter starts from 0.', p_index), p_index);
    END IF;
    IF p_op ? 'delta' AND jsonb_typeof(p_op->'delta') IS DISTINCT FROM 'number' THEN
      PERFORM queen.fail_v1('kv_invalid_delta', format('Operation %s: delta must be a number, got %s.', p_index, queen.json_kind_v1(p_op->'delta')), p_index);
    END IF;
    -- A delta wider than a value may be (9e131071 is 131,072 digits stored) would store an
    -- over-limit counter, or overflow numeric when added (22003, answered as invalid_json). With
    -- both operands within 65,536 bytes the sum cannot overflow; kv_incr_key_v1 checks its size.
    IF NOT queen.kv_value_ok_v1(p_op->'delta') THEN
      PERFORM queen.fail_v1('kv_value_too_large', format(
        'Operation %s: the delta is %s bytes as stored; a value, and so a counter, is at most %s bytes.',
        p_index, octet_length((p_op->'delta')::text), queen.kv_max_value_bytes_v1()), p_index);
    END IF;
    v_min := nullif(p_op->'min', 'null'::jsonb);
    v_max := nullif(p_op->'max', 'null'::jsonb);
    IF (v_min IS NOT NULL AND jsonb_typeof(v_min) <> 'number') OR (v_max IS NOT NULL AND jsonb_typeof(v_max) <> 'number') THEN
      PERFORM queen.fail_v1('kv_invalid_limit_bounds', format('Operation %s: min and max must be numbers when given.', p_index), p_index);
    END IF;
    IF v_min IS NOT NULL AND v_max IS NOT NULL AND v_min::numeric > v_max::numeric THEN
      PERFORM queen.fail_v1('kv_invalid_limit_bounds', format('Operation %s: min is above max.', p_index), p_index);
    END IF;
    RETURN v_out || jsonb_build_object('delta', coalesce(p_op->'delta', '1'::jsonb), 'min', v_min, 'max', v_max);
  END IF;

  RETURN v_out; -- delete
END $function$
CREATE OR REPLACE FUNCTION queen.kv_delete_key_v1(p_tenant uuid, p_index integer, p_op text, p_ns text, p_key text, p_expect bigint, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_answer JSONB;
BEGIN
  -- The answer after a delete shows no row; an expired row physically removed is, as far as
  -- anyone can tell, a delete of nothing.
  DELETE FROM queen.kv AS k
   WHERE k.tenant_id = p_tenant AND k.namespace = p_ns AND k.key = p_key
     AND (p_expect IS NULL OR (queen.kv_live_v1(k.expires_at, p_now) AND k.version = p_expect))
  RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, queen.kv_live_v1(k.expires_at, p_now),
              CASE WHEN NOT queen.kv_live_v1(k.expires_at, p_now) THEN 'absent' END, NULL::queen.kv, p_now)
    INTO v_answer;
  IF NOT FOUND THEN
    SELECT a INTO v_answer FROM queen.kv_unapplied_answer_v1(p_tenant, p_index, p_op, p_ns, p_key, 'version', p_now) a;
  END IF;
  RETURN v_answer;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_expires_at_v1(p_ttl jsonb, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT p_now + make_interval(secs => (p_ttl #>> '{}')::numeric::double precision)
$function$
CREATE OR REPLACE FUNCTION queen.kv_fast_check_op_v1(p_op jsonb, p_index integer, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_name TEXT := CASE WHEN jsonb_typeof(p_op) = 'object' AND queen.kv_fast_path_v1()
                      AND jsonb_typeof(p_op->'ns') = 'string' AND queen.name_ok_v1(p_op->>'ns')
                      AND jsonb_typeof(p_op->'key') = 'string' AND queen.kv_key_ok_v1(p_op->>'key')
                 THEN p_op->>'op' END;
BEGIN
  -- Not a candidate (not an object, or an odd ns/key): the general path says why. Returning here
  -- matters: `NULL AND x` still evaluates x, and `p_op - text[]` raises on a scalar.
  IF v_name IS NULL THEN
    RETURN NULL;
  END IF;
  IF v_name = 'get' AND (p_op - '{op,ns,key}'::text[]) = '{}'::jsonb THEN
    RETURN jsonb_build_object('i', p_index, 'op', 'get', 'kind', 'get', 'ns', p_op->'ns', 'key', p_op->'key');
  END IF;
  IF v_name IN ('put', 'putIfAbsent') AND queen.kv_plain_put_v1(p_op, '{op,ns,key}') THEN
    RETURN jsonb_build_object(
      'i', p_index, 'op', v_name, 'kind', 'put', 'ns', p_op->'ns', 'key', p_op->'key', 'required', false,
      'expiresAt', queen.kv_expires_at_v1(p_op->'ttlSeconds', p_now),
      'value', p_op->'value') || CASE WHEN v_name = 'putIfAbsent' THEN '{"expect": 0}'::jsonb ELSE '{}'::jsonb END;
  END IF;
  RETURN NULL;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_fast_path_v1()
 RETURNS boolean
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT current_setting('queen.kv_fast_path', true) IS DISTINCT FROM 'off'
$function$
CREATE OR REPLACE FUNCTION queen.kv_get_key_v1(p_tenant uuid, p_index integer, p_ns text, p_key text, p_now timestamp with time zone)
 RETURNS SETOF jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT coalesce(
    (SELECT jsonb_build_object('index', p_index, 'op', 'get', 'found', true) || queen.kv_row_json_v1(kv)
       FROM queen.kv kv
      WHERE kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = p_key AND queen.kv_live_v1(kv.expires_at, p_now)),
    jsonb_build_object('index', p_index, 'op', 'get', 'key', p_key, 'found', false))
$function$
CREATE OR REPLACE FUNCTION queen.kv_get_many_v1(p_tenant uuid, p_index integer, p_ns text, p_keys jsonb, p_now timestamp with time zone)
 RETURNS SETOF jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT json_build_object(
    'index', p_index, 'op', 'getMany',
    'rows', coalesce(json_agg(queen.kv_row_json_v1(kv) ORDER BY a.key) FILTER (WHERE kv.key IS NOT NULL), '[]'),
    'missing', coalesce(json_agg(a.key ORDER BY a.key) FILTER (WHERE kv.key IS NULL), '[]'))::jsonb
    FROM (SELECT k COLLATE "C" AS key FROM jsonb_array_elements_text(p_keys) k) a
    LEFT JOIN queen.kv kv ON kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = a.key
                         AND queen.kv_live_v1(kv.expires_at, p_now)
$function$
CREATE OR REPLACE FUNCTION queen.kv_get_prefix_v1(p_tenant uuid, o jsonb, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_ns TEXT := o->>'ns';
  v_prefix TEXT := o->>'prefix';
  -- Past every key under the prefix. Without a successor (a run of U+10FFFF), one U+10FFFF (4
  -- bytes) more than a key's bound holds: 129 of them, 516 bytes, past any key of at most 512.
  v_upper TEXT := coalesce(queen.kv_prefix_upper_v1(o->>'prefix'), (o->>'prefix') || repeat(chr(1114111), queen.kv_max_key_bytes_v1() / 4 + 1));
  v_after TEXT := coalesce(o->>'after', '');
  v_limit INT := (o->>'limit')::int;
  v_call_max BIGINT := queen.limit_v1('kv_max_read_bytes');
  v_max_bytes BIGINT := coalesce((o->>'budget')::bigint, v_call_max);
  v_fresh BOOLEAN := v_max_bytes >= v_call_max;
  v_bytes BIGINT := 0;
  v_spent BIGINT := 0;
  v_rows JSONB[] := '{}';
  v_row JSONB;
  v_last TEXT;
  v_truncated BOOLEAN := false;
  r queen.kv;
BEGIN
  -- All three bounds are index conditions; the btree keeps the tighter lower one at run time, and
  -- the upper one keeps the scan inside the prefix.
  FOR r IN
    SELECT * FROM queen.kv kv
     WHERE kv.tenant_id = p_tenant AND kv.namespace = v_ns
       AND kv.key >= v_prefix AND kv.key > v_after AND kv.key < v_upper
       AND starts_with(kv.key, v_prefix) AND queen.kv_live_v1(kv.expires_at, p_now)
     ORDER BY kv.key
     LIMIT v_limit + 1
  LOOP
    IF cardinality(v_rows) = v_limit THEN
      v_truncated := true;
      EXIT;
    END IF;
    v_row := queen.kv_row_json_v1(r);
    v_bytes := v_bytes + octet_length(r.value::text) + octet_length(r.key);
    IF v_bytes > v_max_bytes AND (cardinality(v_rows) > 0 OR NOT v_fresh) THEN
      v_truncated := true;
      EXIT;
    END IF;
    v_rows := v_rows || v_row;
    v_last := r.key;
    v_spent := v_bytes;
  END LOOP;
  RETURN jsonb_build_object('index', (o->>'i')::int, 'op', 'getPrefix', 'rows', to_jsonb(v_rows),
                            'truncated', v_truncated,
                            -- Truncated always carries a string cursor, even with no rows ('' = from
                            -- the start), so a client that pages while nextAfter is set never stops early.
                            'nextAfter', CASE WHEN v_truncated THEN coalesce(v_last, o->>'after', '') END,
                            '_bytes', v_spent);
END $function$
CREATE OR REPLACE FUNCTION queen.kv_incr_key_v1(p_tenant uuid, p_index integer, p_op text, p_ns text, p_key text, p_delta numeric, p_min numeric, p_max numeric, p_expires timestamp with time zone, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_answer JSONB;
  v_retry BOOLEAN;
BEGIN
  IF (p_min IS NULL OR p_delta >= p_min) AND (p_max IS NULL OR p_delta <= p_max) THEN
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, p_ns, p_key, to_jsonb(0 + p_delta), nextval('queen.kv_version_seq'), p_expires, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = to_jsonb(CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.value::numeric ELSE 0 END + p_delta),
      version = EXCLUDED.version, updated_at = p_now,
      expires_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.expires_at ELSE EXCLUDED.expires_at END,
      created_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.created_at ELSE p_now END
    WHERE CASE WHEN NOT queen.kv_live_v1(k.expires_at, p_now) THEN true
               WHEN jsonb_typeof(k.value) <> 'number' THEN false
               ELSE (p_min IS NULL OR k.value::numeric + p_delta >= p_min) AND (p_max IS NULL OR k.value::numeric + p_delta <= p_max) END
    RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
    IF FOUND THEN
      RETURN queen.kv_incr_size_ok_v1(v_answer, p_index);
    END IF;
  END IF;
  LOOP
    UPDATE queen.kv AS k SET value = to_jsonb(k.value::numeric + p_delta), version = nextval('queen.kv_version_seq'), updated_at = p_now
     WHERE k.tenant_id = p_tenant AND k.namespace = p_ns AND k.key = p_key AND queen.kv_live_v1(k.expires_at, p_now)
       AND CASE WHEN jsonb_typeof(k.value) <> 'number' THEN false
                ELSE (p_min IS NULL OR k.value::numeric + p_delta >= p_min) AND (p_max IS NULL OR k.value::numeric + p_delta <= p_max) END
    RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
    IF FOUND THEN
      RETURN queen.kv_incr_size_ok_v1(v_answer, p_index);
    END IF;
    -- Refused: say why from the row as it is now, locked so it cannot change under the answer.
    SELECT queen.kv_write_answer_v1(p_index, p_op, p_key, false,
             CASE WHEN queen.kv_live_v1(kv.expires_at, p_now) AND jsonb_typeof(kv.value) <> 'number' THEN 'type' ELSE 'limit' END, kv, p_now),
           CASE WHEN queen.kv_live_v1(kv.expires_at, p_now) AND jsonb_typeof(kv.value) = 'number'
                THEN (p_min IS NULL OR kv.value::numeric + p_delta >= p_min) AND (p_max IS NULL OR kv.value::numeric + p_delta <= p_max)
                ELSE false END
      INTO v_answer, v_retry
      FROM queen.kv kv WHERE kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = p_key
      FOR UPDATE;
    IF NOT FOUND THEN
      RETURN queen.kv_write_answer_v1(p_index, p_op, p_key, false, 'limit', NULL::queen.kv, p_now);
    END IF;
    IF NOT v_retry THEN
      RETURN v_answer;
    END IF;
  END LOOP;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_incr_size_ok_v1(p_answer jsonb, p_index integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
  IF NOT queen.kv_value_ok_v1(p_answer->'value') THEN
    PERFORM queen.fail_v1('kv_value_too_large', format(
      'Operation %s: the counter would be %s bytes as stored; at most %s bytes are allowed. Nothing was written.',
      p_index, octet_length((p_answer->'value')::text), queen.kv_max_value_bytes_v1()), p_index);
  END IF;
  RETURN p_answer;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_key_ok_v1(p_key text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT p_key <> '' AND octet_length(p_key) <= queen.kv_max_key_bytes_v1()
$function$
CREATE OR REPLACE FUNCTION queen.kv_live_v1(timestamp with time zone, timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT $1 IS NULL OR $1 > $2 $function$
CREATE OR REPLACE FUNCTION queen.kv_max_key_bytes_v1()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 512 $function$
CREATE OR REPLACE FUNCTION queen.kv_max_ttl_seconds_v1()
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 3155760000 $function$
CREATE OR REPLACE FUNCTION queen.kv_max_value_bytes_v1()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 65536 $function$
CREATE OR REPLACE FUNCTION queen.kv_plain_expiry_v1(p_op jsonb)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN p_op ? 'forever' THEN p_op->'forever' = 'true'::jsonb AND NOT p_op ? 'ttlSeconds'
              ELSE jsonb_typeof(p_op->'ttlSeconds') = 'number' AND (p_op->>'ttlSeconds')::numeric = trunc((p_op->>'ttlSeconds')::numeric)
                   AND (p_op->>'ttlSeconds')::numeric > 0 AND (p_op->>'ttlSeconds')::numeric <= queen.kv_max_ttl_seconds_v1() END
$function$
CREATE OR REPLACE FUNCTION queen.kv_plain_incr_v1(p_rest jsonb)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT queen.kv_plain_expiry_v1(p_rest) AND (p_rest - '{delta,min,max,forever,ttlSeconds}'::text[]) = '{}'::jsonb
         AND coalesce(jsonb_typeof(p_rest->'delta'), 'number') = 'number'
         AND queen.kv_value_ok_v1(coalesce(p_rest->'delta', '1'::jsonb))
         AND coalesce(jsonb_typeof(p_rest->'min'), 'null') IN ('number', 'null')
         AND coalesce(jsonb_typeof(p_rest->'max'), 'null') IN ('number', 'null')
         AND NOT coalesce((p_rest->>'min')::numeric > (p_rest->>'max')::numeric, false)
$function$
CREATE OR REPLACE FUNCTION queen.kv_plain_put_v1(p_op jsonb, p_given text[])
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT (p_op - (p_given || '{value,forever,ttlSeconds}'::text[])) = '{}'::jsonb
         AND p_op ? 'value' AND queen.kv_value_ok_v1(p_op->'value') AND queen.kv_plain_expiry_v1(p_op)
$function$
CREATE OR REPLACE FUNCTION queen.kv_prefix_upper_v1(p_prefix text)
 RETURNS text
 LANGUAGE plpgsql
 IMMUTABLE PARALLEL SAFE
AS $function$
DECLARE
  v_head TEXT := p_prefix;
  v_last INT;
BEGIN
  WHILE length(v_head) > 0 LOOP
    v_last := ascii(right(v_head, 1));
    v_head := left(v_head, -1);
    IF v_last < 1114111 THEN
      v_last := v_last + 1;
      IF v_last BETWEEN 55296 AND 57343 THEN v_last := 57344; END IF; -- skip the surrogates
      RETURN v_head || chr(v_last);
    END IF;
  END LOOP;
  RETURN NULL;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_prune_v1(p_shard smallint, p_limit integer)
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_bitmapscan TO 'off'
AS $function$
DECLARE
  v_n INT;
BEGIN
  DELETE FROM queen.kv WHERE ctid IN (
    SELECT ctid FROM queen.kv
    WHERE shard = p_shard AND expires_at IS NOT NULL AND expires_at < now()
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_put_key_v1(p_tenant uuid, p_index integer, p_op text, p_ns text, p_key text, p_value jsonb, p_expires timestamp with time zone, p_expect bigint, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_answer JSONB;
BEGIN
  IF p_expect IS NULL THEN
    -- Unconditional upsert: replaces the value AND the expiry (a put never inherits a TTL). Over an
    -- expired row it starts a new lineage.
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, p_ns, p_key, p_value, nextval('queen.kv_version_seq'), p_expires, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = EXCLUDED.value, version = EXCLUDED.version, expires_at = EXCLUDED.expires_at,
      updated_at = EXCLUDED.updated_at,
      created_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.created_at ELSE EXCLUDED.created_at END
    RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
    RETURN v_answer;
  END IF;

  IF p_expect = 0 THEN
    -- Must not exist: wins against an expired row still physically there, and resets created_at
    -- (a new lineage). ON CONFLICT locks the row even when the WHERE fails, so the SELECT below
    -- reads the winner we lost to.
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    VALUES (p_tenant, p_ns, p_key, p_value, nextval('queen.kv_version_seq'), p_expires, p_now, p_now)
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = EXCLUDED.value, version = EXCLUDED.version, expires_at = EXCLUDED.expires_at,
      created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at
    WHERE NOT queen.kv_live_v1(k.expires_at, p_now)
    RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
    IF NOT FOUND THEN
      SELECT a INTO v_answer FROM queen.kv_unapplied_answer_v1(p_tenant, p_index, p_op, p_ns, p_key, 'exists', p_now) a;
    END IF;
    RETURN v_answer;
  END IF;

  -- expect: N > 0 never creates a row: a conditional write that matches nothing writes nothing.
  UPDATE queen.kv AS k SET value = p_value, version = nextval('queen.kv_version_seq'),
         expires_at = p_expires, updated_at = p_now
   WHERE k.tenant_id = p_tenant AND k.namespace = p_ns AND k.key = p_key
     AND queen.kv_live_v1(k.expires_at, p_now) AND k.version = p_expect
  RETURNING queen.kv_write_answer_v1(p_index, p_op, p_key, true, NULL, k, p_now) INTO v_answer;
  IF NOT FOUND THEN
    SELECT a INTO v_answer FROM queen.kv_unapplied_answer_v1(p_tenant, p_index, p_op, p_ns, p_key, 'version', p_now) a;
  END IF;
  RETURN v_answer;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_put_many_v1(p_tenant uuid, p_ops jsonb[], p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_answers JSONB;
BEGIN
  WITH o AS (
    SELECT (x->>'i')::int AS i, x->>'op' AS op, x->>'ns' AS ns, x->>'key' AS key, x->'value' AS value,
           (x->>'expiresAt')::timestamptz AS expires_at
      FROM unnest(p_ops) x
  ), w AS (
    INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version, expires_at, created_at, updated_at)
    SELECT p_tenant, o.ns, o.key, o.value, nextval('queen.kv_version_seq'), o.expires_at, p_now, p_now
      FROM o ORDER BY o.ns COLLATE "C", o.key COLLATE "C"
    ON CONFLICT (tenant_id, namespace, key) DO UPDATE SET
      value = EXCLUDED.value, version = EXCLUDED.version, expires_at = EXCLUDED.expires_at,
      updated_at = EXCLUDED.updated_at,
      created_at = CASE WHEN queen.kv_live_v1(k.expires_at, p_now) THEN k.created_at ELSE EXCLUDED.created_at END
    RETURNING k
  )
  SELECT jsonb_agg(queen.kv_write_answer_v1(o.i, o.op, o.key, true, NULL, w.k, p_now) ORDER BY o.i) INTO v_answers
    FROM o JOIN w ON (w.k).namespace = o.ns AND (w.k).key = o.key;
  RETURN v_answers;
END $function$
CREATE OR REPLACE FUNCTION queen.kv_rate_lease_v1(p_process text, p_asks jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
$function$
CREATE OR REPLACE FUNCTION queen.kv_row_json_v1(r queen.kv)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT jsonb_build_object('key', r.key, 'value', r.value, 'version', r.version,
                            'expiresAt', queen.ts_v1(r.expires_at), 'updatedAt', queen.ts_v1(r.updated_at))
$function$
CREATE OR REPLACE FUNCTION queen.kv_run_v1(p_tenant uuid, p_norm jsonb[], p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_n INT := cardinality(p_norm);
  v_norm JSONB[] := p_norm;
  v_results JSONB[];
  v_op JSONB;
  v_answer JSONB;
  v_fail JSONB;
  v_read_budget BIGINT := queen.limit_v1('kv_max_read_bytes');
BEGIN
  v_results := array_fill(NULL::jsonb, ARRAY[v_n]);
  -- Single-key operations in ascending (namespace, key) byte order: the lock order. Then the
  -- multi-key reads, which lock nothing.
  -- A single operation has no order to sort: skipping the query saves a statement per call.
  IF v_n > 1 THEN
    SELECT array_agg(o ORDER BY (o ? 'key') DESC, (o->>'ns') COLLATE "C", (o->>'key') COLLATE "C", (o->>'i')::int)
      INTO v_norm FROM unnest(v_norm) o;
  END IF;
  FOREACH v_op IN ARRAY v_norm
  LOOP
    CASE v_op->>'kind'
      WHEN 'get' THEN
        SELECT a INTO v_answer FROM queen.kv_get_key_v1(p_tenant, (v_op->>'i')::int, v_op->>'ns', v_op->>'key', p_now) a;
      WHEN 'getMany' THEN
        SELECT a INTO v_answer FROM queen.kv_get_many_v1(p_tenant, (v_op->>'i')::int, v_op->>'ns', v_op->'keys', p_now) a;
      WHEN 'getPrefix' THEN
        v_answer := queen.kv_get_prefix_v1(p_tenant, v_op || jsonb_build_object('budget', v_read_budget), p_now);
      WHEN 'put' THEN
        v_answer := queen.kv_put_key_v1(p_tenant, (v_op->>'i')::int, v_op->>'op', v_op->>'ns', v_op->>'key', v_op->'value',
                                        (v_op->>'expiresAt')::timestamptz, (v_op->>'expect')::bigint, p_now);
      WHEN 'delete' THEN
        v_answer := queen.kv_delete_key_v1(p_tenant, (v_op->>'i')::int, v_op->>'op', v_op->>'ns', v_op->>'key',
                                           (v_op->>'expect')::bigint, p_now);
      WHEN 'incr' THEN
        v_answer := queen.kv_incr_key_v1(p_tenant, (v_op->>'i')::int, v_op->>'op', v_op->>'ns', v_op->>'key',
                                         (v_op->>'delta')::numeric, (v_op->>'min')::numeric, (v_op->>'max')::numeric,
                                         (v_op->>'expiresAt')::timestamptz, p_now);
    END CASE;
    IF v_op->>'kind' = 'getPrefix' THEN
      v_read_budget := v_read_budget - (v_answer->>'_bytes')::bigint;
      v_answer := v_answer - '_bytes';
    END IF;
    v_results[(v_op->>'i')::int + 1] := v_answer;
    IF (v_op->>'required')::boolean AND NOT (v_answer->>'applied')::boolean
       AND (v_fail IS NULL OR (v_answer->>'index')::int < (v_fail->>'index')::int) THEN
      v_fail := v_answer;
    END IF;
  END LOOP;

  IF v_fail IS NOT NULL THEN
    -- Caught by kv_apply_at_v1, the only caller, which rolls the writes back and answers this.
    RAISE EXCEPTION USING ERRCODE = 'QK409', MESSAGE = 'kv_precondition', DETAIL = queen.kv_verdict_v1(v_fail)::text;
  END IF;
  IF array_position(v_results, NULL) IS NOT NULL OR cardinality(v_results) <> v_n THEN
    RAISE EXCEPTION 'kv_apply_v1 produced % answers for % operations', cardinality(v_results) - coalesce(array_position(v_results, NULL), 0), v_n;
  END IF;
  RETURN to_jsonb(v_results);
END $function$
CREATE OR REPLACE FUNCTION queen.kv_ts_v1(timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$ SELECT queen.ts_v1($1) $function$
CREATE OR REPLACE FUNCTION queen.kv_unapplied_answer_v1(p_tenant uuid, p_index integer, p_op text, p_ns text, p_key text, p_live_reason text, p_now timestamp with time zone)
 RETURNS SETOF jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT queen.kv_write_answer_v1(p_index, p_op, p_key, false,
           CASE WHEN kv.key IS NOT NULL AND queen.kv_live_v1(kv.expires_at, p_now) THEN p_live_reason ELSE 'absent' END, kv, p_now)
    FROM (SELECT) one LEFT JOIN queen.kv kv ON kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = p_key
$function$
CREATE OR REPLACE FUNCTION queen.kv_usage_rollup_v2(p_pages integer, p_interval interval)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.kv_usage_total_add_v1(p_rel text, p_sign integer, p_tenants uuid[], p_rows bigint[], p_bytes bigint[])
 RETURNS void
 LANGUAGE sql
AS $function$
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
$function$
CREATE OR REPLACE FUNCTION queen.kv_value_ok_v1(p_value jsonb)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT octet_length(p_value::text) <= queen.kv_max_value_bytes_v1()
$function$
CREATE OR REPLACE FUNCTION queen.kv_ver_v1(bigint, timestamp with time zone, timestamp with time zone)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN $1 IS NOT NULL AND queen.kv_live_v1($2, $3) THEN $1 ELSE 0 END
$function$
CREATE OR REPLACE FUNCTION queen.kv_verdict_v1(p_answer jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT jsonb_build_object('ok', false, 'success', false, 'reason', 'kv_precondition',
                            'failedIndex', p_answer->'index', 'kvReason', p_answer->'reason',
                            'version', p_answer->'version', 'value', p_answer->'value')
$function$
CREATE OR REPLACE FUNCTION queen.kv_write_answer_v1(p_index integer, p_op text, p_key text, p_applied boolean, p_reason text, r queen.kv, p_now timestamp with time zone)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT CASE WHEN r.key IS NOT NULL AND queen.kv_live_v1(r.expires_at, p_now)
           THEN jsonb_build_object('index', p_index, 'op', p_op, 'key', p_key, 'applied', p_applied, 'found', true,
                                   'value', r.value, 'version', r.version,
                                   'expiresAt', queen.ts_v1(r.expires_at), 'updatedAt', queen.ts_v1(r.updated_at))
           ELSE jsonb_build_object('index', p_index, 'op', p_op, 'key', p_key, 'applied', p_applied, 'found', false,
                                   'value', 'null'::jsonb, 'version', 0, 'expiresAt', NULL, 'updatedAt', NULL) END
         || CASE WHEN p_applied THEN '{}'::jsonb ELSE jsonb_build_object('reason', p_reason) END
$function$
CREATE OR REPLACE FUNCTION queen.limit_v1(p_name text)
 RETURNS bigint
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT coalesce(nullif(current_setting('queen.' || p_name, true), '')::bigint,
                  CASE p_name WHEN 'kv_max_batch' THEN 1000 WHEN 'kv_prefix_limit' THEN 1000
                              WHEN 'kv_max_read_bytes' THEN 4194304
                              WHEN 'timers_max_horizon_seconds' THEN 31536000
                              WHEN 'timers_max_payload_bytes' THEN 65536 END)
$function$
CREATE OR REPLACE FUNCTION queen.log_ack_batch_body_v1(p_tenant uuid, p_body jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT queen.log_ack_batch_of_v1(false, p_tenant, p_body->'acknowledgments', queen.log_body_group_v1(p_body), false)
$function$
CREATE OR REPLACE FUNCTION queen.log_ack_batch_body_v2(p_tenant uuid, p_body jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT queen.log_ack_batch_of_v1(true, p_tenant, p_body->'acknowledgments', queen.log_body_group_v1(p_body), false)
$function$
CREATE OR REPLACE FUNCTION queen.log_ack_batch_of_v1(p_v2 boolean, p_tenant uuid, p_acks jsonb, p_group jsonb, p_raise boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_norm JSONB[];
  v_out JSONB[] := '{}';
  v_n INT;
  -- The rows read so far, by '<partitionId>/<group>', and whether an ack changed each.
  v_keys TEXT[] := '{}';
  v_rows queen.partition_consumers[] := '{}';
  v_dirty BOOLEAN[] := '{}';
  v_key TEXT;
  v_at INT;
  s RECORD;
  i INT;
  v_fast JSONB;
BEGIN
  -- 0.1.0's batch first, so that v2 tests its flag once (each test is an expression set up at every
  -- transaction).
  IF NOT p_v2 THEN
    v_norm := queen.log_check_acks_v1(p_acks, p_group);
    PERFORM queen.log_lock_consumers_v1(p_tenant, v_norm);
    FOR i IN 1 .. cardinality(v_norm) LOOP
      v_out := v_out || queen.log_ack_one_v1(p_tenant, v_norm[i], i - 1, p_raise);
    END LOOP;
    RETURN to_jsonb(v_out);
  END IF;
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  v_norm := queen.log_check_acks_v1(p_acks, p_group);
  v_n := cardinality(v_norm);
  v_fast := queen.log_ack_fast_v1(p_tenant, v_norm);
  IF v_fast IS NOT NULL THEN RETURN v_fast; END IF;
  PERFORM queen.log_lock_consumers_v1(p_tenant, v_norm);
  FOR i IN 1 .. v_n LOOP
    v_key := (v_norm[i]->>'partitionId') || '/' || (v_norm[i]->>'consumerGroup');
    v_at := array_position(v_keys, v_key);
    SELECT * INTO s FROM queen.log_ack_step_of_v1(true, p_tenant, v_norm[i], i - 1, p_raise, CASE WHEN v_at IS NOT NULL THEN v_rows[v_at] END);
    IF v_at IS NOT NULL THEN
      v_rows[v_at] := s.o_pc;
      v_dirty[v_at] := v_dirty[v_at] OR s.o_applied;
    ELSIF (s.o_pc).partition_id IS NOT NULL THEN
      v_keys := v_keys || v_key;
      v_rows := v_rows || s.o_pc;
      v_dirty := v_dirty || s.o_applied;
    END IF;
    v_out := v_out || s.o_answer;
  END LOOP;
  FOR i IN 1 .. cardinality(v_keys) LOOP
    IF v_dirty[i] THEN PERFORM queen.log_ack_write_v1(v_rows[i]); END IF;
  END LOOP;
  RETURN to_jsonb(v_out);
END $function$
CREATE OR REPLACE FUNCTION queen.log_ack_batch_v1(p_tenant uuid, p_acks jsonb, p_raise boolean DEFAULT false)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT queen.log_ack_batch_of_v1(false, p_tenant, p_acks, NULL, p_raise)
$function$
CREATE OR REPLACE FUNCTION queen.log_ack_batch_v2(p_tenant uuid, p_acks jsonb, p_raise boolean DEFAULT false)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT queen.log_ack_batch_of_v1(true, p_tenant, p_acks, NULL, p_raise)
$function$
CREATE OR REPLACE FUNCTION queen.log_ack_fast_v1(p_tenant uuid, p_norm jsonb[])
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_first JSONB := p_norm[1];
  v_pid UUID;
  v_group TEXT := v_first->>'consumerGroup';
  v_lease UUID := (v_first->>'leaseId')::uuid;
  v_n INT := cardinality(p_norm);
  v_pc queen.partition_consumers;
  v_seqs BIGINT[];
  v_all BIGINT[];
  v_now TIMESTAMPTZ := clock_timestamp();
  v_plan_mode TEXT;
BEGIN
  IF v_n < 2 OR current_setting('queen.log_ack_fast_path', true) = 'off'
     OR EXISTS (SELECT 1 FROM unnest(p_norm) a
                 WHERE a->>'status' <> 'completed' OR a->>'partitionId' <> v_first->>'partitionId'
                    OR a->>'consumerGroup' <> v_group OR (a->>'leaseId') IS DISTINCT FROM (v_first->>'leaseId')) THEN
    RETURN NULL;
  END IF;
  v_pid := (v_first->>'partitionId')::uuid;
  SELECT c.* INTO v_pc FROM queen.partition_consumers c
   WHERE c.partition_id = v_pid AND c.consumer_group = v_group
     AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                  WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
     FOR NO KEY UPDATE OF c;
  IF v_pc.partition_id IS NULL OR v_pc.lease_id IS NULL OR v_pc.lease_expires_at <= v_now
     OR (v_lease IS NOT NULL AND v_lease <> v_pc.lease_id) THEN
    RETURN NULL;
  END IF;
  -- The acks' messages in request order (NULL where none); every one found, distinct, held and
  -- unsettled. Each a probe of the (partition, transactionId) key, under the generic plan, as the
  -- pop's read: a custom plan was made at every call (about 120 µs), and a generic plan of a join
  -- read the partition's whole log (4,000 buffers a batch in bench:log's pop+ack lane).
  v_plan_mode := current_setting('plan_cache_mode');
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  SELECT array_agg((SELECT m.seq FROM queen.messages m WHERE m.partition_id = v_pid AND m.transaction_id = t.a->>'transactionId')
                   ORDER BY t.i) INTO v_seqs
    FROM unnest(p_norm) WITH ORDINALITY t(a, i);
  PERFORM set_config('plan_cache_mode', v_plan_mode, true);
  IF (SELECT count(DISTINCT s) FROM unnest(v_seqs) s) <> v_n
     OR EXISTS (SELECT 1 FROM unnest(v_seqs) s
                 WHERE s IS NULL OR s <= v_pc.cursor_seq OR s = ANY (v_pc.done_seqs) OR s <> ALL (v_pc.lease_seqs) OR s = ANY (v_pc.lease_failed)) THEN
    RETURN NULL;
  END IF;
  -- The cursor passes every finished message it reaches; what stays ahead of it keeps the order
  -- the steps would have recorded it in.
  v_all := v_pc.done_seqs || v_seqs;
  -- A loop of simple expressions: as a query over generate_series it took a custom plan at every batch.
  WHILE v_pc.cursor_seq + 1 = ANY (v_all) LOOP
    v_pc.cursor_seq := v_pc.cursor_seq + 1;
  END LOOP;
  v_pc.done_seqs := coalesce((SELECT array_agg(s ORDER BY i) FROM unnest(v_all) WITH ORDINALITY u(s, i) WHERE s > v_pc.cursor_seq), '{}');
  v_pc.completed := v_pc.completed + v_n;
  v_pc := queen.log_release_settled_v1(v_pc);
  PERFORM queen.log_ack_write_v1(v_pc);
  RETURN (SELECT jsonb_agg(jsonb_build_object('ok', true, 'success', true, 'transactionId', a->'transactionId', 'partitionId', v_pid,
                                              'consumerGroup', v_group, 'status', a->'status', 'deadLetter', false) ORDER BY i)
            FROM unnest(p_norm) WITH ORDINALITY t(a, i));
END $function$
CREATE OR REPLACE FUNCTION queen.log_ack_norm_v1(p_ack jsonb, p_group jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT jsonb_build_object('transactionId', queen.log_str_v1(p_ack->'transactionId'),
                            'partitionId', lower(queen.log_str_v1(p_ack->'partitionId')),
                            'status', queen.log_str_v1(p_ack->'status'),
                            'consumerGroup', coalesce(queen.log_str_v1(coalesce(p_group, p_ack->'consumerGroup')), '__QUEUE_MODE__'),
                            'leaseId', lower(queen.log_str_v1(p_ack->'leaseId')), 'error', queen.log_str_v1(p_ack->'error'))
$function$
CREATE OR REPLACE FUNCTION queen.log_ack_one_v1(p_tenant uuid, a jsonb, p_index integer, p_raise boolean)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT (queen.log_ack_step_of_v1(false, p_tenant, a, p_index, p_raise, NULL::queen.partition_consumers)).o_answer
$function$
CREATE OR REPLACE FUNCTION queen.log_ack_one_v2(p_tenant uuid, a jsonb, p_index integer, p_raise boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  s RECORD;
BEGIN
  SELECT * INTO s FROM queen.log_ack_step_of_v1(true, p_tenant, a, p_index, p_raise, NULL);
  IF s.o_applied THEN PERFORM queen.log_ack_write_v1(s.o_pc); END IF;
  RETURN s.o_answer;
END $function$
CREATE OR REPLACE FUNCTION queen.log_ack_problem_v1(p_ack jsonb, p_group jsonb)
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE
    WHEN jsonb_typeof(p_ack) IS DISTINCT FROM 'object' THEN
      ARRAY['log_invalid_ack', 'an ack is an object {transactionId, partitionId, status, consumerGroup?, leaseId?}.']
    WHEN coalesce(length(queen.log_str_v1(p_ack->'transactionId')), 0) = 0 THEN
      ARRAY['log_transaction_id_required', 'transactionId is required (a non-empty string).']
    WHEN NOT (jsonb_typeof(p_ack->'partitionId') = 'string' AND queen.uuid_ok_v1(p_ack->>'partitionId')) THEN
      ARRAY['log_invalid_partition_id', 'partitionId is required: the UUID the pop answered.']
    WHEN coalesce(queen.log_str_v1(p_ack->'status') NOT IN ('completed', 'failed'), true) THEN
      ARRAY['log_invalid_status', 'status is "completed" or "failed".']
    WHEN coalesce(p_group, p_ack->'consumerGroup', 'null') <> 'null'
         AND NOT (jsonb_typeof(coalesce(p_group, p_ack->'consumerGroup')) = 'string'
                  AND queen.name_ok_v1(coalesce(p_group, p_ack->'consumerGroup') #>> '{}')) THEN
      ARRAY['log_invalid_consumer_group', 'consumerGroup is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.']
    WHEN coalesce(p_ack->'leaseId', 'null') <> 'null'
         AND NOT (jsonb_typeof(p_ack->'leaseId') = 'string' AND queen.uuid_ok_v1(p_ack->>'leaseId')) THEN
      ARRAY['log_invalid_lease_id', 'leaseId is the UUID the pop answered.']
    WHEN jsonb_typeof(p_ack->'error') NOT IN ('string', 'null') THEN
      ARRAY['log_invalid_ack', 'error is a string (why the message failed) or null.']
  END
$function$
CREATE OR REPLACE FUNCTION queen.log_ack_refuse_v1(p_problem text[], p_index integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM queen.fail_v1(p_problem[1], CASE WHEN p_index IS NULL THEN '' ELSE format('Ack %s: ', p_index) END || p_problem[2], p_index);
END $function$
CREATE OR REPLACE FUNCTION queen.log_ack_step_of_v1(p_v2 boolean, p_tenant uuid, a jsonb, p_index integer, p_raise boolean, p_pc queen.partition_consumers, OUT o_answer jsonb, OUT o_pc queen.partition_consumers, OUT o_applied boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_pid UUID := (a->>'partitionId')::uuid;
  v_group TEXT := a->>'consumerGroup';
  v_lease UUID := (a->>'leaseId')::uuid;
  v_seq BIGINT;
  v_pc queen.partition_consumers;
  v_retry_limit INT;
  v_retry_delay INT;
  v_retry_max INT;
  v_failures INT;
  v_reason TEXT;
  v_now TIMESTAMPTZ := clock_timestamp();
  v_dead BOOLEAN := false;
  v_finished BOOLEAN := false;
BEGIN
  o_pc := p_pc;
  o_applied := false;
  -- Only through the tenant's own queues: everything below touches v_pid only once this found it.
  SELECT m.seq INTO v_seq FROM queen.messages m
    JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE m.partition_id = v_pid AND m.transaction_id = a->>'transactionId' AND q.tenant_id = p_tenant;
  IF v_seq IS NULL THEN
    v_reason := 'not_found';
  ELSE
    IF p_pc.partition_id IS NOT NULL THEN
      v_pc := p_pc;
    ELSE
      SELECT * INTO v_pc FROM queen.partition_consumers c
       WHERE c.partition_id = v_pid AND c.consumer_group = v_group FOR NO KEY UPDATE;
    END IF;
    o_pc := v_pc;
    IF v_pc.partition_id IS NULL THEN
      v_reason := 'not_leased';
    ELSIF v_seq <= v_pc.cursor_seq OR v_seq = ANY (v_pc.done_seqs) THEN
      v_reason := 'already_acked';
    ELSIF v_pc.lease_id IS NULL OR v_pc.lease_expires_at <= v_now THEN
      v_reason := CASE WHEN v_lease IS NOT NULL OR v_pc.lease_id IS NOT NULL THEN 'lease_expired' ELSE 'not_leased' END;
    ELSIF v_lease IS NOT NULL AND v_lease <> v_pc.lease_id AND NOT queen.log_lease_shared_v1(v_pid, v_group, v_lease, v_pc.lease_id) THEN
      -- Not this partition's lease, nor the shared id it was handed out under (a pop of several partitions).
      v_reason := 'lease_expired';
    ELSIF v_seq <> ALL (v_pc.lease_seqs) THEN
      v_reason := 'not_leased';
    ELSIF v_seq = ANY (v_pc.lease_failed) THEN
      v_reason := 'already_acked';
    END IF;
  END IF;

  IF v_reason IS NOT NULL THEN
    IF p_raise THEN
      RAISE EXCEPTION USING ERRCODE = 'QK412', MESSAGE = 'ack_failed',
        DETAIL = jsonb_build_object('failedIndex', p_index, 'ackReason', v_reason)::text;
    END IF;
    -- `success` and `error` are what Queen's client reads; `ok` and `ackReason` the cell's.
    o_answer := jsonb_build_object('ok', false, 'success', false, 'error', v_reason, 'reason', 'ack_failed', 'ackReason', v_reason,
      'transactionId', a->'transactionId', 'partitionId', a->'partitionId', 'consumerGroup', v_group, 'status', a->'status');
    RETURN;
  END IF;

  IF a->>'status' = 'completed' THEN
    v_finished := true;
    v_pc.completed := v_pc.completed + 1;
  ELSE
    IF p_v2 THEN
      SELECT q.retry_limit, coalesce(o.retry_delay_ms, queen.log_retry_delay_default_v1()), coalesce(o.retry_delay_max_ms, 0) INTO v_retry_limit, v_retry_delay, v_retry_max
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id LEFT JOIN queen.queue_options o ON o.queue_id = q.id
       WHERE p.id = v_pid;
    ELSE
      -- 0.1.0 reads no queue option: no retryDelay, so no gate below.
      SELECT q.retry_limit, 0, 0 INTO v_retry_limit, v_retry_delay, v_retry_max
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = v_pid;
    END IF;
    INSERT INTO queen.message_failures AS f (partition_id, consumer_group, seq, failures, last_failed_at)
    VALUES (v_pid, v_group, v_seq, 1, v_now)
    ON CONFLICT (partition_id, consumer_group, seq) DO UPDATE SET failures = f.failures + 1, last_failed_at = v_now
    RETURNING failures INTO v_failures;
    v_pc.failures := v_pc.failures + 1;
    -- The ack's own words for the failure, kept for the dead-letter read (the last one wins).
    IF coalesce(a->>'error', '') <> '' THEN
      INSERT INTO queen.message_failure_texts AS t (partition_id, consumer_group, seq, error_message)
      VALUES (v_pid, v_group, v_seq, left(a->>'error', 1024))
      ON CONFLICT (partition_id, consumer_group, seq) DO UPDATE SET error_message = EXCLUDED.error_message;
    END IF;
    IF v_failures > v_retry_limit THEN
      UPDATE queen.message_failures SET dead_lettered_at = v_now
       WHERE partition_id = v_pid AND consumer_group = v_group AND seq = v_seq;
      v_dead := true;
      v_finished := true;
      v_pc.dead_letters := v_pc.dead_letters + 1;
    ELSE
      v_pc.lease_failed := v_pc.lease_failed || v_seq;
      -- retryDelay: the group's partition (and so this message, the first unfinished one once the
      -- lease ends) waits queen.log_retry_delay_ms_v1 from now; a later failure may only extend it.
      IF v_retry_delay > 0 THEN
        INSERT INTO queen.consumer_retry_at AS r (partition_id, consumer_group, retry_at)
        VALUES (v_pid, v_group, v_now + make_interval(secs => queen.log_retry_delay_ms_v1(v_retry_delay, v_retry_max, v_failures) / 1000.0))
        ON CONFLICT (partition_id, consumer_group) DO UPDATE SET retry_at = greatest(r.retry_at, EXCLUDED.retry_at);
      END IF;
    END IF;
  END IF;

  IF v_finished THEN
    IF v_seq = v_pc.cursor_seq + 1 THEN
      v_pc.cursor_seq := v_seq;
      -- Fold in what was finished ahead of the gap that just closed.
      WHILE v_pc.cursor_seq + 1 = ANY (v_pc.done_seqs) LOOP
        v_pc.cursor_seq := v_pc.cursor_seq + 1;
        v_pc.done_seqs := array_remove(v_pc.done_seqs, v_pc.cursor_seq);
      END LOOP;
    ELSE
      v_pc.done_seqs := v_pc.done_seqs || v_seq;
    END IF;
  END IF;

  v_pc := queen.log_release_settled_v1(v_pc);
  IF NOT p_v2 THEN
    UPDATE queen.partition_consumers
       SET cursor_seq = v_pc.cursor_seq, done_seqs = v_pc.done_seqs, lease_id = v_pc.lease_id,
           lease_expires_at = v_pc.lease_expires_at, lease_seqs = v_pc.lease_seqs, lease_failed = v_pc.lease_failed,
           completed = v_pc.completed, failures = v_pc.failures, dead_letters = v_pc.dead_letters, updated_at = v_now
     WHERE partition_id = v_pid AND consumer_group = v_group;
  END IF;
  o_pc := v_pc;
  o_applied := true;
  o_answer := jsonb_build_object('ok', true, 'success', true, 'transactionId', a->'transactionId', 'partitionId', v_pid,
    'consumerGroup', v_group, 'status', a->'status', 'deadLetter', v_dead);
END $function$
CREATE OR REPLACE FUNCTION queen.log_ack_write_v1(p_pc queen.partition_consumers)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  UPDATE queen.partition_consumers
     SET cursor_seq = p_pc.cursor_seq, done_seqs = p_pc.done_seqs, lease_id = p_pc.lease_id,
         lease_expires_at = p_pc.lease_expires_at, lease_seqs = p_pc.lease_seqs, lease_failed = p_pc.lease_failed,
         completed = p_pc.completed, failures = p_pc.failures, dead_letters = p_pc.dead_letters
   WHERE partition_id = p_pc.partition_id AND consumer_group = p_pc.consumer_group;
END $function$
CREATE OR REPLACE FUNCTION queen.log_append_v1(p_fast boolean, p_tenant uuid, p_queue text, p_partition text, p_payloads jsonb[], p_transaction_ids text[], p_trace_ids uuid[], p_span_ids bytea[])
 RETURNS jsonb[]
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_apply_ops_v1(p_tenant uuid, p_ops jsonb, p_sealed jsonb, p_v2 boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_n INT;
  v_op JSONB;
  v_type TEXT;
  -- The pushes' items, gathered as an array (appended in place) and made one jsonb once: a jsonb
  -- grown by || is copied whole at every item, which made a bundle quadratic in its items (8,000
  -- items took 16 s, 20,000 over a minute, holding every partition lock the while).
  v_items JSONB[] := '{}';
  v_acks JSONB[] := '{}';
  v_norm JSONB[] := '{}';
  v_out JSONB[] := '{}';
  v_item JSONB;
  v_queues TEXT[];
  v_pushed JSONB;
  v_slice JSONB;
  v_at INT := 0;
  j INT;
  i INT;
BEGIN
  IF p_v2 THEN
    PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  END IF;
  IF p_ops IS NULL OR jsonb_typeof(p_ops) = 'null' THEN RETURN '[]'::jsonb; END IF;
  IF jsonb_typeof(p_ops) <> 'array' THEN
    PERFORM queen.fail_v1('tx_invalid_operations', 'operations must be an array of {type: "push" | "ack", ...}.', NULL);
  END IF;
  v_n := jsonb_array_length(p_ops);
  IF v_n > 1000 THEN
    PERFORM queen.fail_v1('tx_batch_too_large', format('The bundle has %s operations; at most 1000 are allowed.', v_n), NULL);
  END IF;
  FOR i IN 0 .. v_n - 1 LOOP
    v_op := p_ops->i;
    v_type := CASE WHEN jsonb_typeof(v_op) = 'object' THEN queen.log_str_v1(v_op->'type') END;
    IF v_type = 'ack' THEN
      v_norm := v_norm || queen.log_check_ack_v1(v_op, i);
      v_acks := v_acks || v_norm[i + 1];
    ELSIF v_type = 'push' THEN
      v_norm := v_norm || '{}'::jsonb;
      IF jsonb_typeof(v_op->'items') IS DISTINCT FROM 'array' OR jsonb_array_length(v_op->'items') = 0 THEN
        PERFORM queen.fail_v1('log_items_required', format('Operation %s: a push carries items, a non-empty array.', i), i);
      END IF;
      FOR j IN 0 .. jsonb_array_length(v_op->'items') - 1 LOOP
        v_item := v_op->'items'->j;
        IF jsonb_typeof(v_item) <> 'object'
           OR (v_item ? 'partition' AND jsonb_typeof(v_item->'partition') NOT IN ('string', 'null'))
           OR (v_item ? 'transactionId' AND jsonb_typeof(v_item->'transactionId') NOT IN ('string', 'null')) THEN
          PERFORM queen.fail_v1('log_invalid_item', format(
            'Operation %s, item %s: an item is {queue, partition?, payload, transactionId?} with string names.', i, j), i);
        END IF;
        PERFORM queen.log_check_push_v1(queen.log_str_v1(v_item->'queue'),
          coalesce(queen.log_str_v1(v_item->'partition'), 'Default'), queen.log_str_v1(v_item->'transactionId'), i);
        PERFORM queen.log_check_client_transaction_id_v1(queen.log_str_v1(v_item->'transactionId'), i);
        v_items := v_items || v_item;
      END LOOP;
    ELSE
      PERFORM queen.fail_v1('tx_unknown_operation', format('Operation %s: type is "push" or "ack".', i), i);
    END IF;
  END LOOP;

  -- Pushes to an encrypted queue the API did not seal: QK428 before anything is locked or written.
  -- p_sealed is aligned with the push operations' items in order (queen.log_op_items_v1). A bundle
  -- without pushes (an ack and its once-marker) skips the three (the queues' list is a SQL function
  -- planned at every call).
  IF cardinality(v_items) > 0 THEN
    IF p_v2 THEN
      v_queues := queen.log_item_queues_v1(to_jsonb(v_items));
      PERFORM queen.log_check_sealed_v1(p_tenant, to_jsonb(v_items), p_sealed);
    END IF;
    PERFORM queen.log_lock_partitions_v1(p_tenant, to_jsonb(v_items));
  END IF;
  -- The acks were gathered as they were checked (in order; log_lock_consumers_v1 sorts them).
  IF cardinality(v_acks) > 0 THEN PERFORM queen.log_lock_consumers_v1(p_tenant, v_acks); END IF;

  FOR i IN 0 .. v_n - 1 LOOP
    v_op := p_ops->i;
    IF v_op->>'type' = 'ack' AND p_v2 THEN
      v_out := v_out || (jsonb_build_object('index', i, 'type', 'ack') || queen.log_ack_one_v2(p_tenant, v_norm[i + 1], i, true));
    ELSIF v_op->>'type' = 'ack' THEN
      v_out := v_out || (jsonb_build_object('index', i, 'type', 'ack') || queen.log_ack_one_v1(p_tenant, v_norm[i + 1], i, true));
    ELSE
      -- Item by item in request order (log_push_items_v1 loops; an aggregate would not promise it).
      IF p_sealed IS NULL THEN
        v_pushed := queen.log_push_items_v1(p_tenant, v_op->'items', i);
      ELSE
        -- This operation's share of the sealed payloads (they align with every push item in order).
        SELECT coalesce(jsonb_agg(p_sealed->(v_at + k::int - 1) ORDER BY k), '[]'::jsonb) INTO v_slice
          FROM generate_series(1, jsonb_array_length(v_op->'items')) k;
        v_pushed := queen.log_push_items_v1(p_tenant, queen.log_sealed_items_v1(v_op->'items', v_slice), i);
        PERFORM queen.log_mark_sealed_v1(v_pushed, v_slice);
        v_at := v_at + jsonb_array_length(v_op->'items');
      END IF;
      v_out := v_out || jsonb_build_object('index', i, 'type', 'push', 'items', v_pushed);
    END IF;
  END LOOP;
  -- maxSize: a queue these pushes took past its cap refuses the bundle (raised: all of it rolls back).
  IF p_v2 AND cardinality(v_items) > 0 THEN PERFORM queen.log_check_size_v1(p_tenant, v_queues, NULL); END IF;
  RETURN to_jsonb(v_out);
END $function$
CREATE OR REPLACE FUNCTION queen.log_apply_traced_v1(p_tenant uuid, p_ops jsonb, p_sealed jsonb, p_trace jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT coalesce((SELECT jsonb_agg(CASE WHEN e ->> 'type' = 'push'
                                         THEN e || jsonb_build_object('items', queen.log_stamp_traces_v1(e -> 'items',
                                                     p_ops -> ((e ->> 'index')::int) -> 'items', p_trace, (e ->> 'index')::int))
                                         ELSE e END ORDER BY k)
                     FROM jsonb_array_elements(s.r) WITH ORDINALITY AS t (e, k)), s.r)
    FROM (SELECT queen.log_apply_v2(p_tenant, p_ops, p_sealed) AS r OFFSET 0) s
$function$
CREATE OR REPLACE FUNCTION queen.log_apply_v1(p_tenant uuid, p_ops jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT queen.log_apply_ops_v1(p_tenant, p_ops, NULL, false) $function$
CREATE OR REPLACE FUNCTION queen.log_apply_v2(p_tenant uuid, p_ops jsonb, p_sealed jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT queen.log_apply_ops_v1(p_tenant, p_ops, p_sealed, true) $function$
CREATE OR REPLACE FUNCTION queen.log_auto_ack_v1(p_tenant uuid, p_messages jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF jsonb_array_length(p_messages) = 0 THEN RETURN p_messages; END IF;
  PERFORM queen.log_ack_batch_v2(p_tenant, (
    SELECT jsonb_agg(jsonb_build_object('transactionId', e->'transactionId', 'partitionId', e->'partitionId', 'status', 'completed',
                                        'consumerGroup', e->'consumerGroup', 'leaseId', e->'leaseId') ORDER BY k)
      FROM jsonb_array_elements(p_messages) WITH ORDINALITY AS t (e, k)), false);
  RETURN (SELECT jsonb_agg(e || '{"leaseId": "", "leaseExpiresAt": null}'::jsonb ORDER BY k)
            FROM jsonb_array_elements(p_messages) WITH ORDINALITY AS t (e, k));
END $function$
CREATE OR REPLACE FUNCTION queen.log_backlog_of_v1(p_retained boolean)
 RETURNS TABLE(tenant_id uuid, queue text, consumer_group text, backlog bigint, oldest_at timestamp with time zone)
 LANGUAGE sql
 STABLE
AS $function$
  WITH groups AS (
    SELECT DISTINCT p.queue_id, c.consumer_group
      FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
    UNION ALL
    SELECT q.id, '__QUEUE_MODE__' COLLATE "C" FROM queen.queues q
     WHERE NOT EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.partition_consumers c ON c.partition_id = p.id
                        WHERE p.queue_id = q.id)
  ), parts AS (
    SELECT p.id, p.queue_id, p.last_seq,
           CASE WHEN p_retained
                THEN coalesce((SELECT m0.seq - 1 FROM queen.messages m0 WHERE m0.partition_id = p.id ORDER BY m0.seq LIMIT 1), p.last_seq)
                ELSE 0 END AS floor
      FROM queen.partitions p
  )
  SELECT q.tenant_id, q.name::text, g.consumer_group::text,
         sum(p.last_seq - greatest(coalesce(c.cursor_seq, 0), p.floor)
             - coalesce((SELECT count(*) FROM unnest(c.done_seqs) d WHERE d > p.floor), 0))::bigint,
         min(m.created_at)
    FROM groups g
    JOIN queen.queues q ON q.id = g.queue_id
    JOIN parts p ON p.queue_id = g.queue_id
    LEFT JOIN queen.partition_consumers c ON c.partition_id = p.id AND c.consumer_group = g.consumer_group
    -- The group's oldest unfinished message on the partition: the one right after its cursor (or
    -- after the removed head).
    LEFT JOIN queen.messages m ON m.partition_id = p.id AND m.seq = greatest(coalesce(c.cursor_seq, 0), p.floor) + 1
   WHERE p.last_seq > greatest(coalesce(c.cursor_seq, 0), p.floor)
   GROUP BY q.id, q.tenant_id, q.name, g.consumer_group
$function$
CREATE OR REPLACE FUNCTION queen.log_backlog_v1()
 RETURNS TABLE(tenant_id uuid, queue text, consumer_group text, backlog bigint, oldest_at timestamp with time zone)
 LANGUAGE sql
 STABLE
AS $function$ SELECT * FROM queen.log_backlog_of_v1(false) $function$
CREATE OR REPLACE FUNCTION queen.log_backlog_v2()
 RETURNS TABLE(tenant_id uuid, queue text, consumer_group text, backlog bigint, oldest_at timestamp with time zone)
 LANGUAGE sql
 STABLE
AS $function$ SELECT * FROM queen.log_backlog_of_v1(true) $function$
CREATE OR REPLACE FUNCTION queen.log_body_group_v1(p_body jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN jsonb_typeof(p_body->'consumerGroup') <> 'null' THEN p_body->'consumerGroup' END
$function$
CREATE OR REPLACE FUNCTION queen.log_check_ack_v1(p_ack jsonb, p_index integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_problem TEXT[] := queen.log_ack_problem_v1(p_ack, NULL);
BEGIN
  IF v_problem IS NOT NULL THEN PERFORM queen.log_ack_refuse_v1(v_problem, p_index); END IF;
  RETURN queen.log_ack_norm_v1(p_ack, NULL);
END $function$
CREATE OR REPLACE FUNCTION queen.log_check_acks_v1(p_acks jsonb, p_group jsonb)
 RETURNS jsonb[]
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_norm JSONB[];
  v_n INT;
  v_bad INT;
  v_problem TEXT[];
  v_plan_mode TEXT;
BEGIN
  v_n := queen.array_length_v1(p_acks, 'log_acks_required',
    'acknowledgments must be a non-empty array of {transactionId, partitionId, status, consumerGroup?, leaseId?}.', NULL,
    1000, 'log_batch_too_large', 'The batch has %s acks; at most %s are allowed.');
  -- One ack (a lone POST /ack, a bundle's) is judged by expressions alone: the statement below costs
  -- more to start than it saves on one.
  IF v_n = 1 THEN
    v_problem := queen.log_ack_problem_v1(p_acks->0, p_group);
    IF v_problem IS NOT NULL THEN PERFORM queen.log_ack_refuse_v1(v_problem, NULL); END IF;
    RETURN ARRAY[queen.log_ack_norm_v1(p_acks->0, p_group)];
  END IF;
  v_plan_mode := current_setting('plan_cache_mode');
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  SELECT array_agg(queen.log_ack_norm_v1(t.a, p_group) ORDER BY t.i),
         min(t.i) FILTER (WHERE queen.log_ack_problem_v1(t.a, p_group) IS NOT NULL) - 1
    INTO v_norm, v_bad
    FROM jsonb_array_elements(p_acks) WITH ORDINALITY t(a, i);
  PERFORM set_config('plan_cache_mode', v_plan_mode, true);
  IF v_bad IS NOT NULL THEN
    PERFORM queen.log_ack_refuse_v1(queen.log_ack_problem_v1(p_acks->v_bad, p_group), v_bad);
  END IF;
  RETURN v_norm;
END $function$
CREATE OR REPLACE FUNCTION queen.log_check_client_transaction_id_v1(p_transaction_id text, p_index integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF starts_with(p_transaction_id, 'timer:') THEN
    PERFORM queen.fail_v1('log_reserved_transaction_id', format(
      'Item %s: transactionIds starting with timer: are reserved for the messages timers deliver; choose another.', p_index), p_index);
  END IF;
END $function$
CREATE OR REPLACE FUNCTION queen.log_check_neutral_options_v1(p_options jsonb, p_implemented text[], p_neutral jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_key TEXT;
BEGIN
  FOR v_key IN SELECT k FROM jsonb_object_keys(p_options) k ORDER BY k LOOP
    CONTINUE WHEN v_key = ANY (p_implemented);
    IF NOT p_neutral ? v_key THEN
      PERFORM queen.fail_v1('unsupported', format('options.%s: the cell does not know this option.', v_key), NULL);
    END IF;
    IF p_options->v_key IS DISTINCT FROM p_neutral->v_key AND NOT (jsonb_typeof(p_options->v_key) = 'number'
       AND jsonb_typeof(p_neutral->v_key) = 'number' AND (p_options->>v_key)::numeric = (p_neutral->>v_key)::numeric) THEN
      PERFORM queen.fail_v1('unsupported', format('options.%s: the cell implements only %s (what it always does); it does not implement other values.',
        v_key, p_neutral->v_key), NULL);
    END IF;
  END LOOP;
END $function$
CREATE OR REPLACE FUNCTION queen.log_check_push_v1(p_queue text, p_partition text, p_transaction_id text, p_index integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_check_sealed_v1(p_tenant uuid, p_items jsonb, p_sealed jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_check_size_v1(p_tenant uuid, p_queues text[], p_index integer)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_configure_queue_v1(p_body jsonb)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_queue TEXT := queen.log_str_v1(p_body->'queue');
BEGIN
  IF jsonb_typeof(p_body) <> 'object' THEN
    PERFORM queen.fail_v1('invalid_json', 'The request body must be a JSON object.', NULL);
  END IF;
  IF v_queue IS NULL THEN
    PERFORM queen.fail_v1('log_queue_required', 'queue is required (a string).', NULL);
  END IF;
  PERFORM queen.check_name_v1(v_queue, 'log_invalid_queue', 'A queue name');
  RETURN v_queue;
END $function$
CREATE OR REPLACE FUNCTION queen.log_configure_v1(p_tenant uuid, p_body jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_queue TEXT;
  v_options JSONB := coalesce(nullif(p_body->'options', 'null'::jsonb), '{}'::jsonb);
  -- Queen's options at the value meaning what the cell does.
  v_neutral JSONB := '{"priority": 0, "delayedProcessing": 0, "windowBuffer": 0, "maxSize": 0, "ttl": 0,
    "retryDelay": 0, "retentionSeconds": 0, "completedRetentionSeconds": 0, "maxWaitTimeSeconds": 0,
    "retentionEnabled": false, "encryptionEnabled": false, "deadLetterQueue": true, "dlqAfterMaxRetries": true}';
  v_key TEXT;
  v_timing RECORD;
  v_stored JSONB;
BEGIN
  v_queue := queen.log_configure_queue_v1(p_body);
  IF jsonb_typeof(v_options) <> 'object' THEN
    PERFORM queen.fail_v1('log_invalid_options', 'options must be an object {leaseTime?, retryLimit?}.', NULL);
  END IF;
  FOREACH v_key IN ARRAY ARRAY['namespace', 'task'] LOOP
    IF coalesce(p_body->>v_key, '') <> '' THEN
      PERFORM queen.fail_v1('unsupported', format('%s: the cell has no queue %ss (nor pop by them); leave it out or null.', v_key, v_key), NULL);
    END IF;
  END LOOP;
  PERFORM queen.log_check_neutral_options_v1(v_options, ARRAY['leaseTime', 'retryLimit', 'delayedProcessing', 'windowBuffer'], v_neutral);
  v_timing := queen.log_queue_timing_v1(v_options);
  v_stored := queen.log_store_queue_v1(p_tenant, v_queue, v_timing.lease_time, v_timing.retry_limit,
    v_timing.delayed_processing, v_timing.window_buffer);
  RETURN jsonb_build_object('ok', true, 'configured', true, 'namespace', '', 'task', '',
    'options', v_neutral || (v_stored->'options')) || (v_stored - 'options');
END $function$
CREATE OR REPLACE FUNCTION queen.log_configure_v2(p_tenant uuid, p_body jsonb, p_can_encrypt boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_queue TEXT;
  v_options JSONB := coalesce(nullif(p_body->'options', 'null'::jsonb), '{}'::jsonb);
  v_neutral JSONB := '{"deadLetterQueue": true, "dlqAfterMaxRetries": true}';
  v_implemented TEXT[] := ARRAY['leaseTime', 'retryLimit', 'delayedProcessing', 'windowBuffer', 'retryDelay', 'retryDelayMax',
    'maxSize', 'priority', 'encryptionEnabled'];
  v_retention_keys TEXT[] := ARRAY['retentionSeconds', 'completedRetentionSeconds', 'retentionEnabled', 'maxWaitTimeSeconds', 'ttl'];
  v_ret_s INT;
  v_done_s INT;
  v_wait_s INT;
  v_ttl INT;
  v_enabled BOOLEAN;
  v_ret queen.queue_retention;
  v_key TEXT;
  v_timing RECORD;
  v_stored JSONB;
  v_id UUID;
  v_retry_delay INT;
  v_retry_max INT;
  v_max_size INT;
  v_priority INT;
  v_encrypt BOOLEAN;
  v_namespace TEXT;
  v_task TEXT;
  v_opts queen.queue_options;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  v_queue := queen.log_configure_queue_v1(p_body);
  IF jsonb_typeof(v_options) <> 'object' THEN
    PERFORM queen.fail_v1('log_invalid_options', 'options must be an object {leaseTime?, retryLimit?, ...}.', NULL);
  END IF;
  FOREACH v_key IN ARRAY ARRAY['namespace', 'task'] LOOP
    IF coalesce(jsonb_typeof(p_body->v_key), 'null') NOT IN ('null', 'string')
       OR (queen.log_str_v1(p_body->v_key) <> '' AND NOT queen.log_name_ok_v1(queen.log_str_v1(p_body->v_key))) THEN
      PERFORM queen.fail_v1('log_invalid_options', format(
        '%s is a string of 1 to 128 characters of A-Z a-z 0-9 _ . : - not starting with . : or - (or "" or null).', v_key), NULL);
    END IF;
  END LOOP;
  v_namespace := queen.log_str_v1(p_body->'namespace');
  v_task := queen.log_str_v1(p_body->'task');
  PERFORM queen.log_check_neutral_options_v1(v_options, v_implemented || v_retention_keys, v_neutral);
  v_timing := queen.log_queue_timing_v1(v_options);
  SELECT w[1], w[2], w[3], w[4] INTO v_retry_delay, v_retry_max, v_max_size, v_priority
    FROM queen.log_whole_options_v1(v_options, ARRAY['retryDelay', 'retryDelayMax', 'maxSize', 'priority']) AS o (w);
  IF v_options ? 'encryptionEnabled' THEN
    IF jsonb_typeof(v_options->'encryptionEnabled') <> 'boolean' THEN
      PERFORM queen.fail_v1('log_invalid_options', 'options.encryptionEnabled is true or false.', NULL);
    END IF;
    v_encrypt := (v_options->>'encryptionEnabled')::boolean;
    IF v_encrypt AND NOT coalesce(p_can_encrypt, false) THEN
      PERFORM queen.fail_v1('log_encryption_unavailable',
        'options.encryptionEnabled: this cell has no encryption key; an operator sets QUEEN_ENCRYPTION_KEY (64 hex digits) on every API process first.', NULL);
    END IF;
  END IF;
  -- The retention options: the whole seconds (queen.log_option_bounds_v1), then retentionEnabled,
  -- a boolean, false keeping the queue's messages forever.
  SELECT w[1], w[2], w[3], w[4] INTO v_ret_s, v_done_s, v_wait_s, v_ttl
    FROM queen.log_whole_options_v1(v_options, ARRAY['retentionSeconds', 'completedRetentionSeconds', 'maxWaitTimeSeconds', 'ttl']) AS o (w);
  IF v_options ? 'retentionEnabled' THEN
    IF jsonb_typeof(v_options->'retentionEnabled') <> 'boolean' THEN
      PERFORM queen.fail_v1('log_invalid_options', 'options.retentionEnabled is true or false (false keeps the queue''s messages forever).', NULL);
    END IF;
    v_enabled := (v_options->>'retentionEnabled')::boolean;
  END IF;
  v_stored := queen.log_store_queue_v1(p_tenant, v_queue, v_timing.lease_time, v_timing.retry_limit,
    v_timing.delayed_processing, v_timing.window_buffer);
  v_id := (v_stored->>'queueId')::uuid;
  IF num_nulls(v_retry_delay, v_retry_max, v_max_size, v_priority, v_encrypt, v_namespace, v_task) < 7 THEN
    INSERT INTO queen.queue_options AS o (queue_id, retry_delay_ms, retry_delay_max_ms, max_size, priority, namespace, task, encryption_enabled)
    VALUES (v_id, coalesce(v_retry_delay, queen.log_retry_delay_default_v1()), coalesce(v_retry_max, 0), coalesce(v_max_size, 0), coalesce(v_priority, 0),
            coalesce(v_namespace, ''), coalesce(v_task, ''), coalesce(v_encrypt, false))
    ON CONFLICT (queue_id) DO UPDATE SET retry_delay_ms = coalesce(v_retry_delay, o.retry_delay_ms),
      retry_delay_max_ms = coalesce(v_retry_max, o.retry_delay_max_ms), max_size = coalesce(v_max_size, o.max_size),
      priority = coalesce(v_priority, o.priority), namespace = coalesce(v_namespace, o.namespace), task = coalesce(v_task, o.task),
      encryption_enabled = coalesce(v_encrypt, o.encryption_enabled)
    RETURNING * INTO v_opts;
  ELSE
    SELECT * INTO v_opts FROM queen.queue_options o WHERE o.queue_id = v_id;
  END IF;
  IF v_options ?| v_retention_keys THEN
    INSERT INTO queen.queue_retention AS t (queue_id, retention_seconds, completed_retention_seconds, retention_enabled,
                                          max_wait_time_seconds, ttl)
    VALUES (v_id, coalesce(v_ret_s, 0), coalesce(v_done_s, 0), v_enabled, coalesce(v_wait_s, 0), coalesce(v_ttl, 0))
    ON CONFLICT (queue_id) DO UPDATE SET retention_seconds = coalesce(v_ret_s, t.retention_seconds),
      completed_retention_seconds = coalesce(v_done_s, t.completed_retention_seconds),
      retention_enabled = CASE WHEN v_options ? 'retentionEnabled' THEN v_enabled ELSE t.retention_enabled END,
      max_wait_time_seconds = coalesce(v_wait_s, t.max_wait_time_seconds), ttl = coalesce(v_ttl, t.ttl), updated_at = now()
    RETURNING * INTO v_ret;
  ELSE
    SELECT * INTO v_ret FROM queen.queue_retention t WHERE t.queue_id = v_id;
  END IF;
  RETURN jsonb_build_object('ok', true, 'configured', true,
    'namespace', coalesce(v_opts.namespace, ''), 'task', coalesce(v_opts.task, ''),
    'options', v_neutral || (v_stored->'options') || jsonb_build_object(
      'retryDelay', coalesce(v_opts.retry_delay_ms, queen.log_retry_delay_default_v1()), 'retryDelayMax', coalesce(v_opts.retry_delay_max_ms, 0),
      'maxSize', coalesce(v_opts.max_size, 0), 'priority', coalesce(v_opts.priority, 0),
      'encryptionEnabled', coalesce(v_opts.encryption_enabled, false),
      'retentionSeconds', coalesce(v_ret.retention_seconds, 0), 'completedRetentionSeconds', coalesce(v_ret.completed_retention_seconds, 0),
      'retentionEnabled', v_ret.retention_enabled IS DISTINCT FROM false, 'maxWaitTimeSeconds', coalesce(v_ret.max_wait_time_seconds, 0),
      'ttl', coalesce(v_ret.ttl, 0))) || (v_stored - 'options');
END $function$
CREATE OR REPLACE FUNCTION queen.log_dead_letters_page_v1(p_tenant uuid, p_queue text, p_partition text, p_group text, p_limit integer, p_offset integer, p_from timestamp with time zone, p_to timestamp with time zone, p_marks boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_out JSONB;
  v_total BIGINT;
BEGIN
  IF p_queue IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_queue, 'log_invalid_queue', 'A queue name');
  END IF;
  IF p_group IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  END IF;
  SELECT count(*) INTO v_total
    FROM queen.message_failures f JOIN queen.partitions p ON p.id = f.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE q.tenant_id = p_tenant AND f.dead_lettered_at IS NOT NULL
     AND (p_queue IS NULL OR q.name = p_queue) AND (p_partition IS NULL OR p.name = p_partition)
     AND (p_group IS NULL OR f.consumer_group = p_group)
     AND (p_from IS NULL OR f.dead_lettered_at >= p_from) AND (p_to IS NULL OR f.dead_lettered_at <= p_to);
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'id', queen.log_message_id_v1(d.partition_id, d.seq), 'transactionId', d.transaction_id,
           'partitionId', d.partition_id, 'queue', d.queue, 'partition', d.partition, 'consumerGroup', d.consumer_group,
           'errorMessage', d.error_message, 'retryCount', d.failures, 'data', d.payload, 'producerSub', NULL,
           'createdAt', queen.ts_v1(d.created_at), 'failedAt', queen.ts_v1(d.dead_lettered_at))
           || CASE WHEN NOT p_marks THEN '{}'::jsonb
                   ELSE jsonb_build_object('traceId', d.trace_id, 'traceparent', queen.log_traceparent_v1(d.trace_id, d.span_id))
                        || CASE WHEN d.sealed THEN '{"sealed": true}'::jsonb ELSE '{}'::jsonb END END
           ORDER BY d.dead_lettered_at DESC, d.partition_id, d.seq), '[]'::jsonb)
    INTO v_out
    FROM (SELECT f.partition_id, f.seq, f.consumer_group, f.failures, f.dead_lettered_at, m.transaction_id, m.payload,
                 m.created_at, m.trace_id, m.span_id, q.name AS queue, p.name AS partition, t.error_message,
                 p_marks AND EXISTS (SELECT 1 FROM queen.sealed_messages s WHERE s.partition_id = f.partition_id AND s.seq = f.seq) AS sealed
            FROM queen.message_failures f
            JOIN queen.messages m ON m.partition_id = f.partition_id AND m.seq = f.seq
            LEFT JOIN queen.message_failure_texts t
              ON t.partition_id = f.partition_id AND t.consumer_group = f.consumer_group AND t.seq = f.seq
            JOIN queen.partitions p ON p.id = f.partition_id JOIN queen.queues q ON q.id = p.queue_id
           WHERE q.tenant_id = p_tenant AND f.dead_lettered_at IS NOT NULL
             AND (p_queue IS NULL OR q.name = p_queue) AND (p_partition IS NULL OR p.name = p_partition)
     AND (p_group IS NULL OR f.consumer_group = p_group)
     AND (p_from IS NULL OR f.dead_lettered_at >= p_from) AND (p_to IS NULL OR f.dead_lettered_at <= p_to)
           ORDER BY f.dead_lettered_at DESC, f.partition_id, f.seq
           LIMIT p_limit OFFSET p_offset) d;
  RETURN jsonb_build_object('messages', v_out, 'total', v_total, 'pagination', jsonb_build_object('limit', p_limit, 'offset', p_offset));
END $function$
CREATE OR REPLACE FUNCTION queen.log_dead_letters_v1(p_tenant uuid, p_queue text, p_partition text, p_group text, p_limit integer, p_offset integer)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT queen.log_dead_letters_page_v1(p_tenant, p_queue, p_partition, p_group, p_limit, p_offset, NULL, NULL, false) $function$
CREATE OR REPLACE FUNCTION queen.log_dead_letters_v2(p_tenant uuid, p_queue text, p_partition text, p_group text, p_limit integer, p_offset integer, p_from timestamp with time zone, p_to timestamp with time zone)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT coalesce(queen.tenant_gate_v1(p_tenant),
                  queen.log_dead_letters_page_v1(p_tenant, p_queue, p_partition, p_group, p_limit, p_offset, p_from, p_to, true))
$function$
CREATE OR REPLACE FUNCTION queen.log_delete_consumer_group_v1(p_tenant uuid, p_group text, p_delete_metadata boolean)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_n INT;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  -- The group's rows first, in the order an ack takes them (partition_consumers, then its
  -- failure rows), so a concurrent ack of the group waits here rather than deadlocking.
  PERFORM 1 FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE c.consumer_group = p_group AND q.tenant_id = p_tenant ORDER BY c.partition_id FOR UPDATE OF c;
  WITH gone AS (
    DELETE FROM queen.partition_consumers c USING queen.partitions p, queen.queues q
     WHERE c.consumer_group = p_group AND p.id = c.partition_id AND q.id = p.queue_id AND q.tenant_id = p_tenant
    RETURNING 1)
  SELECT count(*) INTO v_n FROM gone;
  -- Its queues forget it: a pop of the group starts it anew on every partition (queen.log_register_group_v1).
  DELETE FROM queen.consumer_groups g USING queen.queues q
   WHERE g.consumer_group = p_group AND q.id = g.queue_id AND q.tenant_id = p_tenant;
  DELETE FROM queen.message_failure_texts t USING queen.partitions p, queen.queues q
   WHERE t.consumer_group = p_group AND p.id = t.partition_id AND q.id = p.queue_id AND q.tenant_id = p_tenant;
  DELETE FROM queen.message_failures f USING queen.partitions p, queen.queues q
   WHERE f.consumer_group = p_group AND p.id = f.partition_id AND q.id = p.queue_id AND q.tenant_id = p_tenant;
  RETURN jsonb_build_object('ok', true, 'success', true, 'consumerGroup', p_group, 'deletedPartitions', v_n,
                            'metadataDeleted', coalesce(p_delete_metadata, true));
END $function$
CREATE OR REPLACE FUNCTION queen.log_delete_queue_v1(p_tenant uuid, p_queue text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_id UUID;
  r RECORD;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  PERFORM queen.check_name_v1(p_queue, 'log_invalid_queue', 'A queue name');
  SELECT q.id INTO v_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  FOR attempt IN 1 .. 5 LOOP
    EXIT WHEN v_id IS NULL;
    BEGIN
      PERFORM 1 FROM queen.queues q WHERE q.id = v_id FOR UPDATE NOWAIT;
      IF NOT FOUND THEN
        -- Deleted meanwhile by another delete: it may have been created anew since.
        SELECT q.id INTO v_id FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
        CONTINUE;
      END IF;
      PERFORM 1 FROM queen.partitions p WHERE p.queue_id = v_id ORDER BY p.name FOR UPDATE NOWAIT;
      PERFORM 1 FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
       WHERE p.queue_id = v_id ORDER BY c.partition_id, c.consumer_group FOR UPDATE OF c NOWAIT;
      DELETE FROM queen.queues q WHERE q.id = v_id;
      RETURN jsonb_build_object('ok', true, 'deleted', true, 'queue', p_queue, 'existed', true);
    EXCEPTION WHEN lock_not_available THEN
      NULL;
    END;
    -- A row was held: wait for its holders one row at a time, each lock let go at once, so the
    -- delete never waits holding one (a pop's first-sight rows lock partitions in scan order).
    BEGIN
      PERFORM 1 FROM queen.queues q WHERE q.id = v_id FOR UPDATE;
      RAISE EXCEPTION USING ERRCODE = 'QK000';
    EXCEPTION WHEN SQLSTATE 'QK000' THEN NULL;
    END;
    FOR r IN SELECT p.id FROM queen.partitions p WHERE p.queue_id = v_id ORDER BY p.name LOOP
      BEGIN
        PERFORM 1 FROM queen.partitions p WHERE p.id = r.id FOR UPDATE;
        RAISE EXCEPTION USING ERRCODE = 'QK000';
      EXCEPTION WHEN SQLSTATE 'QK000' THEN NULL;
      END;
    END LOOP;
    FOR r IN SELECT c.partition_id, c.consumer_group FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
              WHERE p.queue_id = v_id ORDER BY c.partition_id, c.consumer_group LOOP
      BEGIN
        PERFORM 1 FROM queen.partition_consumers c WHERE c.partition_id = r.partition_id AND c.consumer_group = r.consumer_group FOR UPDATE;
        RAISE EXCEPTION USING ERRCODE = 'QK000';
      EXCEPTION WHEN SQLSTATE 'QK000' THEN NULL;
      END;
    END LOOP;
  END LOOP;
  -- Not found, or five tries without every lock at once (a busy queue): as before, the cascade.
  DELETE FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue RETURNING q.id INTO v_id;
  RETURN jsonb_build_object('ok', true, 'deleted', true, 'queue', p_queue, 'existed', v_id IS NOT NULL);
END $function$
CREATE OR REPLACE FUNCTION queen.log_ensure_partition_v1(p_tenant uuid, p_queue text, p_partition text, OUT q_id uuid, OUT p_id uuid)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_extend_lease_v1(p_tenant uuid, p_lease text, p_seconds integer)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT queen.log_extend_lease_v2(p_tenant, p_lease, p_seconds)
$function$
CREATE OR REPLACE FUNCTION queen.log_extend_lease_v2(p_tenant uuid, p_lease text, p_seconds integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_now TIMESTAMPTZ := clock_timestamp();
  v_expires TIMESTAMPTZ;
  v_own BOOLEAN;
  v_from UUID := '00000000-0000-0000-0000-000000000000';
  v_to UUID := 'ffffffff-ffff-ffff-ffff-ffffffffffff';
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF NOT queen.uuid_ok_v1(p_lease) THEN
    PERFORM queen.fail_v1('log_invalid_lease_id', 'The lease id is the UUID the pop answered.', NULL);
  END IF;
  IF p_seconds IS NOT NULL AND (p_seconds < 1 OR p_seconds > 86400) THEN
    PERFORM queen.fail_v1('log_invalid_lease_time', 'seconds is a whole number from 1 to 86400.', NULL);
  END IF;
  v_own := substr(lower(p_lease), 15, 1) = '8';
  IF v_own THEN
    v_from := (left(replace(lower(p_lease), '-', ''), 12) || '00000000000000000000')::uuid;
    v_to := (left(replace(lower(p_lease), '-', ''), 12) || 'ffffffffffffffffffff')::uuid;
  ELSE
    -- The shared id of a pop of several partitions: every live lease handed out under it.
    WITH extended AS (
      UPDATE queen.partition_consumers c
         SET lease_expires_at = v_now + make_interval(secs => coalesce(p_seconds, (
               SELECT q.lease_time FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = c.partition_id))),
             updated_at = v_now
        FROM queen.shared_leases s
       WHERE s.shared_id = p_lease::uuid AND c.partition_id = s.partition_id AND c.consumer_group = s.consumer_group
         AND c.lease_id = s.lease_id AND c.lease_expires_at > v_now
         AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                      WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
      RETURNING c.lease_expires_at)
    SELECT min(e.lease_expires_at) INTO v_expires FROM extended e;
  END IF;
  IF v_expires IS NULL THEN
    UPDATE queen.partition_consumers c
       SET lease_expires_at = v_now + make_interval(secs => coalesce(p_seconds, (
             SELECT q.lease_time FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE p.id = c.partition_id))),
           updated_at = v_now
     WHERE c.partition_id BETWEEN v_from AND v_to AND c.lease_id = p_lease::uuid AND c.lease_expires_at > v_now
       AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                    WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
    RETURNING c.lease_expires_at INTO v_expires;
  END IF;
  IF v_expires IS NULL THEN
    RETURN jsonb_build_object('ok', false, 'success', false, 'error', 'lease_expired', 'reason', 'lease_expired', 'leaseId', p_lease);
  END IF;
  RETURN jsonb_build_object('ok', true, 'success', true, 'leaseId', lower(p_lease), 'leaseExpiresAt', queen.ts_v1(v_expires));
END $function$
CREATE OR REPLACE FUNCTION queen.log_fast_item_v1(p_items jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT CASE WHEN jsonb_typeof(p_items) = 'array' AND p_items->1 IS NULL AND jsonb_typeof(p_items->0) = 'object' THEN p_items->0 END
$function$
CREATE OR REPLACE FUNCTION queen.log_fast_partition_v1(p_item jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT CASE coalesce(jsonb_typeof(p_item->'partition'), 'null') WHEN 'null' THEN 'Default' WHEN 'string' THEN p_item->>'partition' END
$function$
CREATE OR REPLACE FUNCTION queen.log_fast_queue_v1(p_item jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT CASE WHEN jsonb_typeof(p_item->'queue') = 'string' THEN p_item->>'queue' END
$function$
CREATE OR REPLACE FUNCTION queen.log_fast_transaction_id_v1(p_item jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT CASE coalesce(jsonb_typeof(p_item->'transactionId'), 'null') WHEN 'null' THEN '' WHEN 'string' THEN nullif(p_item->>'transactionId', '') END
$function$
CREATE OR REPLACE FUNCTION queen.log_gauges_answer_v1(p_backlog numeric, p_max_group bigint, p_oldest_at timestamp with time zone)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT jsonb_build_object(
    'backlog', coalesce(p_backlog, 0),
    'maxGroupBacklog', coalesce(p_max_group, 0),
    'oldestUnconsumedSeconds', coalesce(extract(epoch FROM now() - p_oldest_at)::double precision, 0),
    'deadLetters', (SELECT count(*) FROM (SELECT 1 FROM queen.message_failures
                                           WHERE dead_lettered_at IS NOT NULL LIMIT 1000000) d))
$function$
CREATE OR REPLACE FUNCTION queen.log_gauges_v1()
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$ SELECT queen.log_gauges_answer_v1(sum(b.backlog), max(b.backlog), min(b.oldest_at)) FROM queen.log_backlog_v1() b $function$
CREATE OR REPLACE FUNCTION queen.log_gauges_v2()
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$ SELECT queen.log_gauges_answer_v1(sum(b.backlog), max(b.backlog), min(b.oldest_at)) FROM queen.log_backlog_v2() b $function$
CREATE OR REPLACE FUNCTION queen.log_group_stale_v1(c queen.partition_consumers, p_floor bigint, p_empty boolean, p_idle_before timestamp with time zone, p_now timestamp with time zone)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT c.cursor_seq <= p_floor AND cardinality(c.done_seqs) = 0
     AND (c.lease_id IS NULL OR (c.lease_expires_at <= p_now AND NOT EXISTS (SELECT 1 FROM unnest(c.lease_seqs) s WHERE s > p_floor)))
     AND (p_empty OR coalesce(c.last_leased_at, c.created_at) < p_idle_before)
     AND NOT EXISTS (SELECT 1 FROM queen.consumer_retry_at t
                      WHERE t.partition_id = c.partition_id AND t.consumer_group = c.consumer_group AND t.retry_at > p_now)
$function$
CREATE OR REPLACE FUNCTION queen.log_item_queues_v1(p_items jsonb)
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT coalesce(array_agg(DISTINCT e->>'queue'), '{}') FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_items) = 'array' THEN p_items ELSE '[]' END) e
   WHERE jsonb_typeof(e->'queue') = 'string'
$function$
CREATE OR REPLACE FUNCTION queen.log_lapse_lease_v1(p_partition uuid, p_group text, p_retry_limit integer, p_now timestamp with time zone)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_pc queen.partition_consumers;
  v_counted INT;
  v_dead BIGINT[];
BEGIN
  SELECT * INTO v_pc FROM queen.partition_consumers c
   WHERE c.partition_id = p_partition AND c.consumer_group = p_group;
  IF v_pc.lease_id IS NULL OR v_pc.lease_expires_at > p_now THEN RETURN; END IF;

  WITH lapsed AS (
    SELECT s.seq FROM unnest(v_pc.lease_seqs) s (seq)
     WHERE s.seq > v_pc.cursor_seq AND s.seq <> ALL (v_pc.done_seqs) AND s.seq <> ALL (v_pc.lease_failed)
       AND EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = p_partition AND m.seq = s.seq)
  ), counted AS (
    INSERT INTO queen.message_failures AS f (partition_id, consumer_group, seq, failures, last_failed_at, dead_lettered_at)
    SELECT p_partition, p_group, l.seq, 1, p_now, CASE WHEN 1 > p_retry_limit THEN p_now END FROM lapsed l
    ON CONFLICT (partition_id, consumer_group, seq) DO UPDATE
       SET failures = f.failures + 1, last_failed_at = p_now,
           dead_lettered_at = CASE WHEN f.failures + 1 > p_retry_limit THEN p_now ELSE f.dead_lettered_at END
    RETURNING f.seq, f.dead_lettered_at IS NOT NULL AS dead
  )
  SELECT count(*)::int, coalesce(array_agg(k.seq ORDER BY k.seq) FILTER (WHERE k.dead), '{}')
    INTO v_counted, v_dead FROM counted k;

  -- Dead letters are finished: fold them into the cursor as a `failed` ack past the limit does.
  v_pc.done_seqs := v_pc.done_seqs || v_dead;
  WHILE v_pc.cursor_seq + 1 = ANY (v_pc.done_seqs) LOOP
    v_pc.cursor_seq := v_pc.cursor_seq + 1;
    v_pc.done_seqs := array_remove(v_pc.done_seqs, v_pc.cursor_seq);
  END LOOP;

  UPDATE queen.partition_consumers
     SET cursor_seq = v_pc.cursor_seq, done_seqs = v_pc.done_seqs, lease_id = NULL, lease_expires_at = NULL,
         lease_seqs = '{}', lease_failed = '{}', failures = failures + v_counted,
         dead_letters = dead_letters + cardinality(v_dead), updated_at = p_now
   WHERE partition_id = p_partition AND consumer_group = p_group;
END $function$
CREATE OR REPLACE FUNCTION queen.log_lease_id_v1(p_partition uuid)
 RETURNS uuid
 LANGUAGE sql
AS $function$
  -- One expression (two random UUIDs rather than one read twice), so the planner inlines it into the
  -- pop's own statement instead of planning this body at every call (about 40 µs).
  SELECT (left(replace(p_partition::text, '-', ''), 12) || '8' || substr(replace(gen_random_uuid()::text, '-', ''), 14, 3)
          || substr(replace(gen_random_uuid()::text, '-', ''), 17, 16))::uuid
$function$
CREATE OR REPLACE FUNCTION queen.log_lease_shared_v1(p_pid uuid, p_group text, p_shared uuid, p_lease uuid)
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT EXISTS (SELECT 1 FROM queen.shared_leases s
                  WHERE s.partition_id = p_pid AND s.consumer_group = p_group AND s.shared_id = p_shared AND s.lease_id = p_lease)
$function$
CREATE OR REPLACE FUNCTION queen.log_lock_consumers_v1(p_tenant uuid, p_acks jsonb[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  k RECORD;
BEGIN
  -- One ack has no order to keep (the once-marker bundle, and most acks).
  IF cardinality(p_acks) < 2 THEN RETURN; END IF;
  -- One primary-key probe a row, in ascending order: a plan that stays cached. The set-based form
  -- (IN over the unnested acks) was planned afresh at every call, about 250 µs (pg_stat_statements
  -- with track_planning over npm run bench:log's bundle lane).
  FOR k IN SELECT DISTINCT (a->>'partitionId')::uuid AS pid, (a->>'consumerGroup') COLLATE "C" AS grp
             FROM unnest(p_acks) a ORDER BY 1, 2 LOOP
    PERFORM 1 FROM queen.partition_consumers c
     WHERE c.partition_id = k.pid AND c.consumer_group = k.grp
       AND EXISTS (SELECT 1 FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
                    WHERE p.id = c.partition_id AND q.tenant_id = p_tenant)
       FOR NO KEY UPDATE OF c;
  END LOOP;
END $function$
CREATE OR REPLACE FUNCTION queen.log_lock_partition_v1(p_tenant uuid, p_queue text, p_partition text, OUT q_id uuid, OUT p_id uuid, OUT last_seq bigint)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_lock_partitions_v1(p_tenant uuid, p_items jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  r RECORD;
BEGIN
  FOR r IN
    SELECT DISTINCT it->>'queue' COLLATE "C" AS queue, coalesce(it->>'partition', 'Default') COLLATE "C" AS partition
      FROM jsonb_array_elements(p_items) it ORDER BY 1, 2
  LOOP
    PERFORM queen.log_lock_partition_v1(p_tenant, r.queue, r.partition);
  END LOOP;
END $function$
CREATE OR REPLACE FUNCTION queen.log_mark_sealed_v1(p_results jsonb, p_sealed jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF p_sealed IS NULL OR jsonb_typeof(p_sealed) <> 'array' THEN RETURN; END IF;
  INSERT INTO queen.sealed_messages (partition_id, seq)
  SELECT m.partition_id, m.seq FROM jsonb_array_elements(p_results) WITH ORDINALITY AS t (e, k)
    JOIN queen.messages m ON m.partition_id = (e->>'partition_id')::uuid AND m.transaction_id = e->>'transaction_id'
   WHERE e->>'status' = 'queued' AND jsonb_typeof(p_sealed->(k::int - 1)) = 'string'
  ON CONFLICT DO NOTHING;
END $function$
CREATE OR REPLACE FUNCTION queen.log_max_transaction_id_bytes_v1()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 256 $function$
CREATE OR REPLACE FUNCTION queen.log_message_id_v1(p_partition uuid, p_seq bigint)
 RETURNS uuid
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT md5(p_partition::text || '/' || p_seq::text)::uuid
$function$
CREATE OR REPLACE FUNCTION queen.log_message_traces_v1(p_tenant uuid, p_partition text, p_transaction_id text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF NOT queen.uuid_ok_v1(p_partition) THEN
    PERFORM queen.fail_v1('log_invalid_partition_id', 'partitionId is the UUID the pop answered.', NULL);
  END IF;
  RETURN jsonb_build_object('traces', coalesce((
    SELECT jsonb_agg(jsonb_build_object('id', t.n, 'transactionId', t.transaction_id, 'partitionId', t.partition_id,
             'consumerGroup', t.consumer_group, 'eventType', t.event_type, 'traceNames', to_jsonb(t.trace_names), 'data', t.data,
             'createdAt', queen.ts_v1(t.created_at)) ORDER BY t.n)
      FROM queen.message_traces t JOIN queen.partitions p ON p.id = t.partition_id JOIN queen.queues q ON q.id = p.queue_id
     WHERE t.partition_id = p_partition::uuid AND t.transaction_id = p_transaction_id AND q.tenant_id = p_tenant), '[]'::jsonb));
END $function$
CREATE OR REPLACE FUNCTION queen.log_name_ok_v1(p_name text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT p_name IS NOT NULL AND queen.name_ok_v1(p_name)
$function$
CREATE OR REPLACE FUNCTION queen.log_op_items_v1(p_ops jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT coalesce(jsonb_agg(it ORDER BY o, k), '[]'::jsonb)
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_ops) = 'array' THEN p_ops ELSE '[]' END) WITH ORDINALITY AS x (op, o),
         jsonb_array_elements(CASE WHEN jsonb_typeof(op) = 'object' AND op->>'type' = 'push' AND jsonb_typeof(op->'items') = 'array'
                                   THEN op->'items' ELSE '[]' END) WITH ORDINALITY AS y (it, k)
$function$
CREATE OR REPLACE FUNCTION queen.log_option_bounds_v1()
 RETURNS TABLE(key text, lo integer, hi integer, code text, message text)
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  VALUES ('leaseTime', 1, 86400, 'log_invalid_lease_time', 'options.leaseTime is a whole number of seconds from 1 to 86400.'),
    ('retryLimit', 0, 1000, 'log_invalid_retry_limit', 'options.retryLimit is a whole number from 0 to 1000.'),
    ('delayedProcessing', 0, 86400, 'log_invalid_options', 'options.delayedProcessing is a whole number of seconds from 0 to 86400.'),
    ('windowBuffer', 0, 86400, 'log_invalid_options', 'options.windowBuffer is a whole number of seconds from 0 to 86400.'),
    ('retryDelay', 0, 86400000, 'log_invalid_options', 'options.retryDelay is a whole number of milliseconds from 0 to 86400000.'),
    ('retryDelayMax', 0, 86400000, 'log_invalid_options', 'options.retryDelayMax is a whole number of milliseconds from 0 to 86400000.'),
    ('maxSize', 0, 1000000000, 'log_invalid_options', 'options.maxSize is a whole number of messages from 0 (no cap) to 1000000000.'),
    ('priority', -1000000, 1000000, 'log_invalid_options', 'options.priority is a whole number from -1000000 to 1000000.'),
    -- The retention options (sql/functions/retention.sql says what each removes): whole seconds
    -- from 0 (not set) to ten years.
    ('retentionSeconds', 0, 315360000, 'log_invalid_options',
     'options.retentionSeconds is a whole number of seconds from 0 (the cell''s default retention) to 315360000.'),
    ('completedRetentionSeconds', 0, 315360000, 'log_invalid_options',
     'options.completedRetentionSeconds is a whole number of seconds from 0 (not set) to 315360000.'),
    ('maxWaitTimeSeconds', 0, 315360000, 'log_invalid_options', 'options.maxWaitTimeSeconds is a whole number of seconds from 0 (not set) to 315360000.'),
    ('ttl', 0, 315360000, 'log_invalid_options', 'options.ttl is a whole number of seconds from 0 (not set) to 315360000.')
$function$
CREATE OR REPLACE FUNCTION queen.log_pop_many_of_v1(p_pop_v2 boolean, p_tenant uuid, p_queue text, p_partition text, p_group text, p_batch integer, p_partitions integer)
 RETURNS queen.log_pop_answer
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_group TEXT := coalesce(p_group, '__QUEUE_MODE__');
  v_answer queen.log_pop_answer;
  v_shared UUID;
  v_lease UUID;
BEGIN
  IF p_partitions IS NULL OR p_partitions < 1 OR p_partitions > 1000 THEN
    PERFORM queen.fail_v1('log_invalid_partitions', 'partitions is a whole number from 1 to 1000.', NULL);
  END IF;
  v_answer := queen.log_pop_of_v1(p_pop_v2, p_tenant, p_queue, p_partition, p_group, p_batch, p_partitions);
  IF cardinality(v_answer.leases) < 2 THEN RETURN v_answer; END IF;
  v_shared := gen_random_uuid();
  INSERT INTO queen.shared_leases AS s (partition_id, consumer_group, shared_id, lease_id)
  SELECT u.partition_id, v_group, v_shared, u.lease_id FROM unnest(v_answer.partition_ids, v_answer.leases) u (partition_id, lease_id)
  ON CONFLICT (partition_id, consumer_group) DO UPDATE SET shared_id = EXCLUDED.shared_id, lease_id = EXCLUDED.lease_id;
  -- Each message names the shared id in place of its partition's lease, in the answer's text: this
  -- pop made those lease ids, so no payload stored before it holds one, and only the answer's own
  -- "leaseId" values match.
  FOREACH v_lease IN ARRAY v_answer.leases LOOP
    v_answer.messages := replace(v_answer.messages, '"leaseId": "' || v_lease || '"', '"leaseId": "' || v_shared || '"');
  END LOOP;
  v_answer.lease_id := v_shared;
  RETURN v_answer;
END $function$
CREATE OR REPLACE FUNCTION queen.log_pop_many_v1(p_tenant uuid, p_queue text, p_partition text, p_group text, p_batch integer, p_partitions integer)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT (queen.log_pop_many_of_v1(false, p_tenant, p_queue, p_partition, p_group, p_batch, p_partitions)).messages::jsonb
$function$
CREATE OR REPLACE FUNCTION queen.log_pop_many_v2(p_tenant uuid, p_queue text, p_partition text, p_group text, p_batch integer, p_partitions integer)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT (queen.log_pop_many_of_v1(true, p_tenant, p_queue, p_partition, p_group, p_batch, p_partitions)).messages::jsonb
$function$
CREATE OR REPLACE FUNCTION queen.log_pop_many_v3(p_tenant uuid, p_queue text, p_partition text, p_group text, p_batch integer, p_partitions integer)
 RETURNS queen.log_pop_answer
 LANGUAGE sql
AS $function$
  SELECT queen.log_pop_many_of_v1(true, p_tenant, p_queue, p_partition, p_group, p_batch, p_partitions)
$function$
CREATE OR REPLACE FUNCTION queen.log_pop_match_v1(p_tenant uuid, p_namespace text, p_task text, p_group text, p_batch integer, p_partitions integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_group TEXT := coalesce(p_group, '__QUEUE_MODE__');
  v_out JSONB := '[]';
  r RECORD;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF coalesce(p_namespace, '') = '' AND coalesce(p_task, '') = '' THEN
    PERFORM queen.fail_v1('log_invalid_queue', 'A pop names a queue, or a namespace and/or a task.', NULL);
  END IF;
  FOR r IN
    SELECT q.name FROM queen.queues q JOIN queen.queue_options o ON o.queue_id = q.id
     WHERE q.tenant_id = p_tenant AND (coalesce(p_namespace, '') = '' OR o.namespace = p_namespace)
       AND (coalesce(p_task, '') = '' OR o.task = p_task)
     ORDER BY o.priority DESC,
              (SELECT min(m.created_at) FROM queen.partitions p
                 LEFT JOIN queen.partition_consumers c ON c.partition_id = p.id AND c.consumer_group = v_group
                 JOIN queen.messages m ON m.partition_id = p.id AND m.seq = coalesce(c.cursor_seq, 0) + 1
                WHERE p.queue_id = q.id) NULLS LAST,
              q.name
     LIMIT 1000
  LOOP
    v_out := queen.log_pop_many_v2(p_tenant, r.name, NULL, v_group, p_batch, p_partitions);
    EXIT WHEN jsonb_array_length(v_out) > 0;
  END LOOP;
  RETURN v_out;
END $function$
CREATE OR REPLACE FUNCTION queen.log_pop_of_v1(p_v2 boolean, p_tenant uuid, p_queue text, p_partition text, p_group text, p_batch integer, p_partitions integer)
 RETURNS queen.log_pop_answer
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_group TEXT := coalesce(p_group, '__QUEUE_MODE__');
  v_queue queen.queues;
  v_cands UUID[];
  v_candidate UUID;
  v_unseen UUID[];
  v_pc queen.partition_consumers;
  v_seqs BIGINT[];
  v_out TEXT;
  v_name TEXT;
  v_lease UUID;
  v_now TIMESTAMPTZ;
  v_expires TIMESTAMPTZ;
  v_lapsed BOOLEAN;
  v_found RECORD;
  v_delay INT := 0;
  v_window INT := 0;
  v_due_by TIMESTAMPTZ := 'infinity';
  v_quiet_by TIMESTAMPTZ := 'infinity';
  v_retry_gate BOOLEAN := false;
  v_plan_mode TEXT;
  v_left INT := p_batch;
  v_leased INT := 0;
  v_answer queen.log_pop_answer := ROW('[]', NULL, NULL, NULL, NULL, '{}', '{}');
BEGIN
  IF p_v2 THEN
    PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  END IF;
  IF NOT queen.log_name_ok_v1(p_queue) THEN
    PERFORM queen.fail_v1('log_invalid_queue', 'A queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF p_partition IS NOT NULL AND NOT queen.log_name_ok_v1(p_partition) THEN
    PERFORM queen.fail_v1('log_invalid_partition', 'A partition name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF NOT queen.log_name_ok_v1(v_group) THEN
    PERFORM queen.fail_v1('log_invalid_consumer_group', 'A consumer group is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', NULL);
  END IF;
  IF p_batch IS NULL OR p_batch < 1 OR p_batch > 1000 THEN
    PERFORM queen.fail_v1('log_invalid_batch', 'batch is a whole number from 1 to 1000.', NULL);
  END IF;

  -- The queue and its delays (queen.queue_delays, below), in one statement; v2's with its retry gate.
  IF p_v2 THEN
    SELECT q AS queue, coalesce(d.delayed_processing, 0) AS delay, coalesce(d.window_buffer, 0) AS window_buffer,
           coalesce(o.retry_delay_ms, queen.log_retry_delay_default_v1()) > 0 AS retry_gate,
           EXISTS (SELECT 1 FROM queen.consumer_groups g WHERE g.queue_id = q.id AND g.consumer_group = v_group) AS known INTO v_found
      FROM queen.queues q LEFT JOIN queen.queue_delays d ON d.queue_id = q.id LEFT JOIN queen.queue_options o ON o.queue_id = q.id
     WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  ELSE
    -- 0.1.0 reads no queue option: no gate (the same row type as v2's, so v_found's fields keep their plans).
    SELECT q AS queue, coalesce(d.delayed_processing, 0) AS delay, coalesce(d.window_buffer, 0) AS window_buffer, false AS retry_gate,
           EXISTS (SELECT 1 FROM queen.consumer_groups g WHERE g.queue_id = q.id AND g.consumer_group = v_group) AS known INTO v_found
      FROM queen.queues q LEFT JOIN queen.queue_delays d ON d.queue_id = q.id
     WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  END IF;
  IF NOT FOUND THEN RETURN v_answer; END IF;
  -- A pop leases, so it writes, even when it finds nothing to lease this time: on a database that
  -- turned read-only (a demoted primary) it is refused as a push is (503 db_unavailable), rather
  -- than answering "nothing" and holding its consumer's long poll on a database no push reaches.
  IF current_setting('transaction_read_only') = 'on' THEN
    RAISE EXCEPTION USING ERRCODE = 'read_only_sql_transaction', MESSAGE = 'cannot lease in a read-only transaction';
  END IF;
  v_queue := v_found.queue;
  v_delay := v_found.delay;
  v_window := v_found.window_buffer;
  v_retry_gate := v_found.retry_gate;
  IF NOT v_found.known THEN
    PERFORM queen.log_register_group_v1(v_queue.id, v_group);
  END IF;

  v_now := clock_timestamp();
  -- delayedProcessing: a message is delivered once it is that old (v_due_by: created at or before).
  -- windowBuffer: a partition is leased once its newest message is that old. The messages of a
  -- partition go in seq order, so a message not yet due holds back the ones behind it, and a
  -- partition is a candidate only when its next message (cursor_seq + 1: every earlier one is
  -- finished, and a message is never deleted but with its queue) is due.
  IF v_delay > 0 THEN v_due_by := v_now - make_interval(secs => v_delay); END IF;
  IF v_window > 0 THEN v_quiet_by := v_now - make_interval(secs => v_window); END IF;
  v_expires := v_now + make_interval(secs => v_queue.lease_time);

  -- The candidates, in the order they are offered: of the partitions this pop reads (the named
  -- one, else the queue's ready ones), those with a message past the group's cursor (cursor 0
  -- where the group has no row yet) and no live lease, the least recently leased first, then by
  -- name; and those the group has no row on yet (v_unseen).
  -- One pass of probes by key: each partition's group row and each message test is kept a probe
  -- whatever the plan by its OFFSET 0 (the planner neither flattens such a subquery into a join nor
  -- hashes it). As a join, a generic plan made for a queue of 10,000 ready partitions hashed every
  -- group row of the cell at every later pop of a small queue: 15 ms where the probes take 0.3. The
  -- retry gate's table holds a row only where a group acked `failed`, so the planner may hash it (a
  -- probe a row cost 4 µs more). A test of p_partition before each branch of the UNION ALL runs one
  -- of them; a test of a parameter before each delay's and the retry gate's probe leaves them out
  -- of a queue without them (and of 0.1.0's pop, which has no gate).
  -- Being probes, its generic plan is the right one for any queue, so it is planned once a
  -- session: left to choose, PostgreSQL planned it at every pop (about 150 µs), its custom plan
  -- pruning the UNION ALL branch the parameter rules out. It is planned with the statistics of
  -- that moment, though: a table ANALYZEd while empty (reltuples 0, where one never analyzed is
  -- assumed 10 pages) is scanned rather than probed, and stays so in the session's plan until its
  -- next ANALYZE (autovacuum's, after 50 rows and 10 % changed). bench:pop-partitions, which
  -- ANALYZEs before a group's first pop, once met 51 ms a pop of 1,000 partitions this way.
  -- Planned with sequential scans off it cost about 30 µs more a pop (index scans start dearer
  -- than scans of empty tables), so it is left to autovacuum.
  v_plan_mode := current_setting('plan_cache_mode');
  PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
  SELECT array_agg(p.id ORDER BY c.last_leased_at NULLS FIRST, p.name) FILTER (WHERE
           (c.lease_id IS NULL OR c.lease_expires_at <= v_now)
           AND p.last_seq > coalesce(c.cursor_seq, 0)
           AND (v_due_by = 'infinity' OR EXISTS (SELECT 1 FROM queen.messages m
                 WHERE m.partition_id = p.id AND m.seq = coalesce(c.cursor_seq, 0) + 1 AND m.created_at <= v_due_by OFFSET 0))
           AND (v_quiet_by = 'infinity' OR EXISTS (SELECT 1 FROM queen.messages m
                 WHERE m.partition_id = p.id AND m.seq = p.last_seq AND m.created_at <= v_quiet_by OFFSET 0))
           -- retryDelay: a partition whose group acked a message `failed` waits until retry_at.
           AND (NOT v_retry_gate OR NOT EXISTS (SELECT 1 FROM queen.consumer_retry_at r
                 WHERE r.partition_id = p.id AND r.consumer_group = v_group AND r.retry_at > v_now))),
         array_agg(p.id) FILTER (WHERE c.consumer_group IS NULL)
    INTO v_cands, v_unseen
    FROM (SELECT p.id, p.name, p.last_seq FROM queen.partitions p
           WHERE p_partition IS NULL AND p.queue_id = v_queue.id AND p.ready
          UNION ALL
          SELECT p.id, p.name, p.last_seq FROM queen.partitions p
           WHERE p_partition IS NOT NULL AND p.queue_id = v_queue.id AND p.name = p_partition) p
    LEFT JOIN LATERAL (SELECT c.consumer_group, c.cursor_seq, c.lease_id, c.lease_expires_at, c.last_leased_at
                         FROM queen.partition_consumers c
                        WHERE c.partition_id = p.id AND c.consumer_group = v_group OFFSET 0) c ON true;
  PERFORM set_config('plan_cache_mode', v_plan_mode, true);

  -- The group's row on each of them it has none on (v_unseen, just read; ON CONFLICT covers a pop
  -- of the group creating it meanwhile), created on first sight, also where the partition is no
  -- candidate yet: a row behind a removed head is one the sweeper's retention moves to the first
  -- retained message, which a delayed queue's pop needs. Each partition a row is created for is
  -- locked FOR KEY SHARE (the lock the foreign key's check takes anyway): a pop racing its queue's
  -- DELETE either holds the partition, and the delete waits for it, or waits for the delete and
  -- skips the partition it removed. Before, the INSERT's foreign-key check met the committed delete
  -- and broke partition_consumers_partition_id_fkey, a 500; now the pop of a queue deleted under it
  -- answers what the pop of a missing queue answers: nothing (204).
  IF v_unseen IS NOT NULL THEN
    INSERT INTO queen.partition_consumers (partition_id, consumer_group)
    SELECT p.id, v_group FROM queen.partitions p WHERE p.id = ANY (v_unseen) FOR KEY SHARE OF p
    ON CONFLICT DO NOTHING;
  END IF;
  IF v_cands IS NULL THEN RETURN v_answer; END IF;

  -- The first p_partitions candidates whose group row this pop can lock (SKIP LOCKED: a partition
  -- another consumer is popping or acking right now is simply passed over), each judged again on
  -- the version locked: another pop may have leased it, or an ack finished it or set its retry
  -- gate, since the read above. Each is leased what is left of p_batch; one read of the candidates
  -- serves them all.
  FOREACH v_candidate IN ARRAY v_cands LOOP
    SELECT c.* INTO v_pc FROM queen.partition_consumers c
     WHERE c.partition_id = v_candidate AND c.consumer_group = v_group
       AND (c.lease_id IS NULL OR c.lease_expires_at <= v_now)
       AND EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = c.partition_id AND p.last_seq > c.cursor_seq)
       AND (NOT v_retry_gate OR NOT EXISTS (SELECT 1 FROM queen.consumer_retry_at r
             WHERE r.partition_id = c.partition_id AND r.consumer_group = c.consumer_group AND r.retry_at > v_now))
       FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;

    -- A lapsed lease is settled here, under the row lock this pop holds, before anything is
    -- handed out again: this is where its expiry is noticed, and clearing it in the same
    -- transaction is what makes it count once.
    v_lapsed := v_pc.lease_id IS NOT NULL;
    IF v_lapsed THEN
      PERFORM queen.log_lapse_lease_v1(v_pc.partition_id, v_group, v_queue.retry_limit, v_now);
      SELECT c.* INTO v_pc FROM queen.partition_consumers c
       WHERE c.partition_id = v_pc.partition_id AND c.consumer_group = v_group;
    END IF;
    -- The partition's name: its messages name it, and so does the answer's top.
    SELECT p.name INTO v_name FROM queen.partitions p WHERE p.id = v_pc.partition_id;

    -- Past the cursor, minus what was finished ahead of it; with a delay, up to the first message
    -- not yet due.
    IF p_v2 THEN
      -- The answer is built from the same rows, read once in (partition_id, seq) order: a second
      -- read of the batch by its seqs (seq = ANY, v1's below) went, under a session's cached generic
      -- plan, through the partition's transactionId index and filtered the partition's whole history
      -- (test/log/popCost.test.ts).
      v_lease := queen.log_lease_id_v1(v_pc.partition_id);
      -- Queen's message (id, transactionId, traceId, data, producerSub, createdAt, partitionId,
      -- partition, leaseId, consumerGroup) and the cell's additions (queue, leaseExpiresAt, retryCount,
      -- traceparent: the W3C context of the request that pushed it, docs/tracing.md).
      -- The answer is JSON text, written as jsonb writes it (keys by length, then bytes: "id",
      -- "data", then the rest) and the API sends it as it is: a jsonb answer took each payload
      -- apart twice (into its object, then into the array) and put it together again to be written
      -- out, about 30 µs a message of 1.8 KB of JSON (test/log/popAnswer.test.ts holds the two
      -- texts equal). Each payload is written once, as it is stored.
      -- Each row's failures and sealed mark are a probe by key: the statement runs under its
      -- generic plan (planned once a session, not at every pop: the planner put about 500 µs into
      -- it each time, since a LIMIT of a parameter makes the generic plan look dearer than any
      -- custom one), and a plan of probes stays a plan of probes (the candidates' statement above
      -- says when it does not).
      v_plan_mode := current_setting('plan_cache_mode');
      PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
      SELECT array_agg(n.seq ORDER BY n.seq),
             '[' || string_agg('{"id": "' || queen.log_message_id_v1(n.partition_id, n.seq) || '", "data": ' || coalesce(n.payload::text, 'null')
               || ', ' || substr((jsonb_build_object(
               'transactionId', n.transaction_id, 'traceId', n.trace_id,
               'traceparent', queen.log_traceparent_v1(n.trace_id, n.span_id),
               'producerSub', NULL, 'partitionId', n.partition_id, 'queue', v_queue.name, 'partition', v_name,
               'leaseId', v_lease, 'leaseExpiresAt', queen.ts_v1(v_expires),
               'consumerGroup', v_group, 'createdAt', queen.ts_v1(n.created_at),
               'retryCount', coalesce((SELECT f.failures FROM queen.message_failures f
                                        WHERE f.partition_id = n.partition_id AND f.consumer_group = v_group AND f.seq = n.seq), 0))
             -- A payload stored encrypted (queen.sealed_messages) is marked for the API to open.
             || CASE WHEN (SELECT true FROM queen.sealed_messages s WHERE s.partition_id = n.partition_id AND s.seq = n.seq)
                     THEN '{"sealed": true}'::jsonb ELSE '{}'::jsonb END)::text, 2), ', ' ORDER BY n.seq) || ']'
        INTO v_seqs, v_out
        FROM (SELECT m.*, bool_and(v_due_by = 'infinity' OR m.created_at <= v_due_by) OVER (ORDER BY m.seq) AS due FROM (
                SELECT m.* FROM queen.messages m
                 WHERE m.partition_id = v_pc.partition_id AND m.seq > v_pc.cursor_seq AND m.seq <> ALL (v_pc.done_seqs)
                 ORDER BY m.seq LIMIT v_left) m) n
       WHERE n.due;
      PERFORM set_config('plan_cache_mode', v_plan_mode, true);
    ELSIF v_due_by = 'infinity' THEN
      SELECT array_agg(s.seq ORDER BY s.seq) INTO v_seqs FROM (
        SELECT m.seq FROM queen.messages m
         WHERE m.partition_id = v_pc.partition_id AND m.seq > v_pc.cursor_seq AND m.seq <> ALL (v_pc.done_seqs)
         ORDER BY m.seq LIMIT v_left
      ) s;
    ELSE
      SELECT array_agg(s.seq ORDER BY s.seq) INTO v_seqs FROM (
        SELECT n.seq, bool_and(n.created_at <= v_due_by) OVER (ORDER BY n.seq) AS due FROM (
          SELECT m.seq, m.created_at FROM queen.messages m
           WHERE m.partition_id = v_pc.partition_id AND m.seq > v_pc.cursor_seq AND m.seq <> ALL (v_pc.done_seqs)
           ORDER BY m.seq LIMIT v_left
        ) n
      ) s WHERE s.due;
    END IF;
    -- Nothing to hand out here after all (the lapse just settled dead-lettered the partition's last
    -- messages): the next candidate may have some. The row stays locked to this transaction's end.
    CONTINUE WHEN v_seqs IS NULL;

    IF p_v2 THEN
      -- updated_at (the row's last column) is left as it was, by the ack too: a HOT update logs the new
      -- version less the bytes it shares with the old one at either end, so a row whose tail is
      -- unchanged logs only the lease's middle. last_leased_at says when the group last read.
      UPDATE queen.partition_consumers
         SET lease_id = v_lease, lease_expires_at = v_expires, lease_seqs = v_seqs, lease_failed = '{}',
             last_leased_at = v_now, deliveries = deliveries + cardinality(v_seqs)
       WHERE partition_id = v_pc.partition_id AND consumer_group = v_group;
    ELSE
      -- 0.1.0's lease (a random id) and its answer, read again by the batch's seqs.
      v_lease := gen_random_uuid();
      UPDATE queen.partition_consumers
         SET lease_id = v_lease, lease_expires_at = v_expires, lease_seqs = v_seqs, lease_failed = '{}',
             last_leased_at = v_now, deliveries = deliveries + cardinality(v_seqs), updated_at = v_now
       WHERE partition_id = v_pc.partition_id AND consumer_group = v_group;
      v_out := (
        -- Queen's message (id, transactionId, traceId, data, producerSub, createdAt, partitionId,
        -- partition, leaseId, consumerGroup) and the cell's additions (queue, leaseExpiresAt, retryCount).
        SELECT jsonb_agg(jsonb_build_object(
                 'id', queen.log_message_id_v1(m.partition_id, m.seq), 'transactionId', m.transaction_id, 'traceId', NULL,
                 'data', m.payload, 'producerSub', NULL, 'partitionId', m.partition_id, 'queue', v_queue.name,
                 'partition', p.name, 'leaseId', v_lease, 'leaseExpiresAt', queen.ts_v1(v_expires),
                 'consumerGroup', v_group, 'createdAt', queen.ts_v1(m.created_at),
                 'retryCount', coalesce(f.failures, 0)) ORDER BY m.seq)
          FROM queen.messages m
          JOIN queen.partitions p ON p.id = m.partition_id
          LEFT JOIN queen.message_failures f ON f.partition_id = m.partition_id AND f.consumer_group = v_group AND f.seq = m.seq
         WHERE m.partition_id = v_pc.partition_id AND m.seq = ANY (v_seqs))::text;
    END IF;
    -- The first partition leased is the answer's at its top (Queen's); the arrays join as text.
    IF v_leased = 0 THEN
      v_answer := ROW(v_out, v_name, v_pc.partition_id, v_lease, v_queue.name, ARRAY[v_lease], ARRAY[v_pc.partition_id]);
    ELSE
      v_answer.messages := left(v_answer.messages, -1) || ', ' || substr(v_out, 2);
      v_answer.leases := v_answer.leases || v_lease;
      v_answer.partition_ids := v_answer.partition_ids || v_pc.partition_id;
    END IF;
    -- jsonb's cap on an array (268,435,455 bytes), which the API meets by asking for half the batch:
    -- PostgreSQL's own bound on text is 1 GiB, too much to hand a worker.
    IF octet_length(v_answer.messages) > 268435455 THEN
      RAISE EXCEPTION USING ERRCODE = 'program_limit_exceeded', MESSAGE = 'the pop''s answer passes 268435455 bytes';
    END IF;
    v_leased := v_leased + 1;
    v_left := v_left - cardinality(v_seqs);
    EXIT WHEN v_leased >= p_partitions OR v_left <= 0;
  END LOOP;
  RETURN v_answer;
END $function$
CREATE OR REPLACE FUNCTION queen.log_pop_v1(p_tenant uuid, p_queue text, p_partition text, p_group text, p_batch integer)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT (queen.log_pop_of_v1(false, p_tenant, p_queue, p_partition, p_group, p_batch, 1)).messages::jsonb
$function$
CREATE OR REPLACE FUNCTION queen.log_pop_v2(p_tenant uuid, p_queue text, p_partition text, p_group text, p_batch integer)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT (queen.log_pop_of_v1(true, p_tenant, p_queue, p_partition, p_group, p_batch, 1)).messages::jsonb
$function$
CREATE OR REPLACE FUNCTION queen.log_pop_v3(p_tenant uuid, p_queue text, p_partition text, p_group text, p_batch integer)
 RETURNS queen.log_pop_answer
 LANGUAGE sql
AS $function$
  SELECT queen.log_pop_of_v1(true, p_tenant, p_queue, p_partition, p_group, p_batch, 1)
$function$
CREATE OR REPLACE FUNCTION queen.log_push_coalesced_traced_v1(p_tenant uuid, p_bodies jsonb, p_traces jsonb)
 RETURNS SETOF text
 LANGUAGE sql
AS $function$
  SELECT CASE WHEN r.results IS NOT NULL
              THEN queen.log_stamp_traces_v1(r.results::jsonb, p_bodies -> (r.k::int - 1) -> 'items', p_traces -> (r.k::int - 1))::text END
    FROM queen.log_push_coalesced_v2(p_tenant, p_bodies) WITH ORDINALITY AS r (results, k)
   ORDER BY r.k
$function$
CREATE OR REPLACE FUNCTION queen.log_push_coalesced_v1(p_tenant uuid, p_bodies jsonb)
 RETURNS SETOF text
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_push_coalesced_v2(p_tenant uuid, p_bodies jsonb)
 RETURNS SETOF text
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF EXISTS (SELECT 1 FROM queen.queues q JOIN queen.queue_options o ON o.queue_id = q.id
              WHERE q.tenant_id = p_tenant AND (o.max_size > 0 OR o.encryption_enabled)
                AND q.name IN (SELECT queen.log_fast_queue_v1(queen.log_fast_item_v1(b->'items')) FROM jsonb_array_elements(p_bodies) b)) THEN
    RETURN QUERY SELECT NULL::text FROM jsonb_array_elements(p_bodies);
    RETURN;
  END IF;
  RETURN QUERY SELECT queen.log_push_coalesced_v1(p_tenant, p_bodies);
END $function$
CREATE OR REPLACE FUNCTION queen.log_push_deleted_v1()
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'lock_not_available',
    MESSAGE = 'queue deleted under this push three times in a row';
END $function$
CREATE OR REPLACE FUNCTION queen.log_push_fast_many_v1(p_tenant uuid, p_queue text, p_partition text, p_payloads jsonb[], p_transaction_ids text[])
 RETURNS jsonb[]
 LANGUAGE sql
AS $function$
  SELECT queen.log_append_v1(true, p_tenant, p_queue, p_partition, p_payloads, p_transaction_ids, NULL, NULL)
$function$
CREATE OR REPLACE FUNCTION queen.log_push_fast_v1(p_tenant uuid, p_queue text, p_partition text, p_payload jsonb, p_transaction_id text)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT (queen.log_push_fast_many_v1(p_tenant, p_queue, p_partition, ARRAY[p_payload], ARRAY[p_transaction_id]))[1]
$function$
CREATE OR REPLACE FUNCTION queen.log_push_items_v1(p_tenant uuid, p_items jsonb, p_index integer DEFAULT NULL::integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_push_one_fast_v1(p_tenant uuid, p_items jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT CASE WHEN queen.log_fast_item_v1(p_items) IS NOT NULL THEN
    queen.log_push_fast_v1(p_tenant, queen.log_fast_queue_v1(p_items->0), queen.log_fast_partition_v1(p_items->0),
                           p_items->0->'payload', queen.log_fast_transaction_id_v1(p_items->0))
  END
$function$
CREATE OR REPLACE FUNCTION queen.log_push_request_v1(p_tenant uuid, p_items jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT coalesce(nullif(jsonb_build_array(queen.log_push_one_fast_v1(p_tenant, p_items)), '[null]'::jsonb),
                  queen.log_push_items_v1(p_tenant, p_items))
$function$
CREATE OR REPLACE FUNCTION queen.log_push_request_v2(p_tenant uuid, p_items jsonb, p_sealed jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_push_traced_v1(p_tenant uuid, p_items jsonb, p_trace jsonb, p_sealed jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT queen.log_stamp_traces_v1(r, p_items, p_trace) FROM (SELECT queen.log_push_request_v2(p_tenant, p_items, p_sealed) AS r OFFSET 0) s
$function$
CREATE OR REPLACE FUNCTION queen.log_push_v1(p_tenant uuid, p_queue text, p_partition text, p_payload jsonb, p_transaction_id text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_queue_timing_v1(p_options jsonb, OUT lease_time integer, OUT retry_limit integer, OUT delayed_processing integer, OUT window_buffer integer)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
  v INT[] := queen.log_whole_options_v1(p_options, ARRAY['leaseTime', 'retryLimit', 'delayedProcessing', 'windowBuffer']);
BEGIN
  SELECT v[1], v[2], v[3], v[4] INTO lease_time, retry_limit, delayed_processing, window_buffer;
END $function$
CREATE OR REPLACE FUNCTION queen.log_record_trace_v1(p_tenant uuid, p_body jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_txid TEXT := queen.log_str_v1(p_body->'transactionId');
  v_pid TEXT := queen.log_str_v1(p_body->'partitionId');
  v_group TEXT := coalesce(queen.log_str_v1(p_body->'consumerGroup'), '__QUEUE_MODE__');
  v_type TEXT := coalesce(queen.log_str_v1(p_body->'eventType'), 'info');
  v_names TEXT[];
  v_n INT;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF jsonb_typeof(p_body) <> 'object' THEN
    PERFORM queen.fail_v1('invalid_json', 'The request body must be a JSON object.', NULL);
  END IF;
  IF v_txid IS NULL OR v_txid = '' THEN
    PERFORM queen.fail_v1('log_transaction_id_required', 'transactionId is required (a non-empty string).', NULL);
  END IF;
  IF NOT queen.uuid_ok_v1(v_pid) THEN
    PERFORM queen.fail_v1('log_invalid_partition_id', 'partitionId is required: the UUID the pop answered.', NULL);
  END IF;
  PERFORM queen.check_name_v1(v_group, 'log_invalid_consumer_group', 'A consumer group');
  IF NOT p_body ? 'data' THEN
    PERFORM queen.fail_v1('log_invalid_trace', 'data is required (any JSON).', NULL);
  END IF;
  IF octet_length((p_body->'data')::text) > queen.log_trace_max_bytes_v1() THEN
    PERFORM queen.fail_v1('log_invalid_trace', format('data is at most %s bytes as JSON.', queen.log_trace_max_bytes_v1()), NULL);
  END IF;
  IF length(v_type) > 64 THEN
    PERFORM queen.fail_v1('log_invalid_trace', 'eventType is at most 64 characters.', NULL);
  END IF;
  v_names := CASE jsonb_typeof(p_body->'traceNames')
    WHEN 'string' THEN ARRAY[p_body->>'traceNames']
    WHEN 'array' THEN (SELECT array_agg(e #>> '{}') FROM jsonb_array_elements(p_body->'traceNames') e WHERE jsonb_typeof(e) = 'string')
    ELSE '{}' END;
  IF cardinality(v_names) > 16 OR EXISTS (SELECT 1 FROM unnest(v_names) x WHERE length(x) > 256) THEN
    PERFORM queen.fail_v1('log_invalid_trace', 'traceNames is at most 16 names of at most 256 characters each.', NULL);
  END IF;
  -- The message row, locked (NO KEY UPDATE: the foreign-key checks of acks and failures, KEY
  -- SHARE, never wait on it) so two traces of one message take their numbers in turn.
  PERFORM 1 FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
   WHERE m.partition_id = v_pid::uuid AND m.transaction_id = v_txid AND q.tenant_id = p_tenant FOR NO KEY UPDATE OF m;
  IF NOT FOUND THEN
    RETURN jsonb_build_object('ok', false, 'success', false, 'error', 'not_found');
  END IF;
  SELECT coalesce(max(t.n), 0) INTO v_n FROM queen.message_traces t WHERE t.partition_id = v_pid::uuid AND t.transaction_id = v_txid;
  IF v_n >= queen.log_traces_per_message_v1() THEN
    RETURN jsonb_build_object('ok', false, 'success', false, 'error', 'trace_limit');
  END IF;
  INSERT INTO queen.message_traces (partition_id, transaction_id, n, consumer_group, event_type, trace_names, data)
  VALUES (v_pid::uuid, v_txid, v_n + 1, v_group, v_type, coalesce(v_names, '{}'), p_body->'data');
  RETURN jsonb_build_object('ok', true, 'success', true, 'traceId', v_n + 1);
END $function$
CREATE OR REPLACE FUNCTION queen.log_register_group_v1(p_queue_id uuid, p_group text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM 1 FROM queen.queues q WHERE q.id = p_queue_id FOR NO KEY UPDATE;
  IF NOT FOUND THEN RETURN; END IF;
  INSERT INTO queen.consumer_groups (queue_id, consumer_group) VALUES (p_queue_id, p_group) ON CONFLICT DO NOTHING;
  UPDATE queen.partitions p SET ready = true
   WHERE p.id IN (SELECT s.id FROM queen.partitions s
                   WHERE s.queue_id = p_queue_id AND NOT s.ready
                     AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c
                                      WHERE c.partition_id = s.id AND c.consumer_group = p_group AND c.cursor_seq >= s.last_seq)
                   ORDER BY s.name FOR NO KEY UPDATE);
END $function$
CREATE OR REPLACE FUNCTION queen.log_release_settled_v1(p_pc queen.partition_consumers)
 RETURNS queen.partition_consumers
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM unnest(p_pc.lease_seqs) s
                  WHERE s > p_pc.cursor_seq AND s <> ALL (p_pc.done_seqs) AND s <> ALL (p_pc.lease_failed)) THEN
    p_pc.lease_id := NULL;
    p_pc.lease_expires_at := NULL;
    p_pc.lease_seqs := '{}';
    p_pc.lease_failed := '{}';
  END IF;
  RETURN p_pc;
END $function$
CREATE OR REPLACE FUNCTION queen.log_retain_v1(p_shard smallint, p_limit integer, p_default_seconds integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 SET enable_bitmapscan TO 'off'
 SET plan_cache_mode TO 'force_custom_plan'
AS $function$
DECLARE
  r RECORD;
  g RECORD;
  v_now TIMESTAMPTZ := now();
  v_budget INT := p_limit;
  v_first BIGINT;
  v_first_at TIMESTAMPTZ;
  v_last BIGINT;
  v_floor BIGINT;
  v_minc BIGINT;
  v_walk BIGINT;
  v_upto BIGINT;
  v_cap BIGINT;
  v_target BIGINT;
  v_locked TEXT[];
  v_n INT;
  v_unf INT;
  v_bytes BIGINT;
  v_cursor BIGINT;
  v_done BIGINT[];
  v_per JSONB := '{}';
  v_key TEXT;
  v_removed INT := 0;
  v_unfinished INT := 0;
  v_total_bytes BIGINT := 0;
  v_idle_before TIMESTAMPTZ;
  v_empty BOOLEAN;
  v_g INT;
  v_groups INT := 0;
  v_partitions INT := 0;
  -- What the removed rows had counted (queen.log_totals_v1 keeps it): messages pushed (a removed
  -- partition's last_seq), and the completed and failed deliveries of removed group rows.
  v_gone_pushed BIGINT := 0;
  v_gone_completed BIGINT := 0;
  v_gone_failed BIGINT := 0;
  v_gc BIGINT;
  v_gf BIGINT;
  -- The shard's partitions: those whose id's first 6 bits are the shard number, a range of the
  -- partitions' primary key (ids are random, so the 64 ranges hold about as many partitions each).
  v_lo UUID := (lpad(to_hex(p_shard::int << 2), 2, '0') || '000000-0000-0000-0000-000000000000')::uuid;
  v_hi UUID := CASE WHEN p_shard < 63 THEN (lpad(to_hex((p_shard::int + 1) << 2), 2, '0') || '000000-0000-0000-0000-000000000000')::uuid END;
BEGIN
  FOR r IN
    SELECT s.* FROM (
      SELECT p.id, q.tenant_id, q.name AS queue, a.any_s, a.unfinished_s, a.finished_s
        FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
        LEFT JOIN queen.queue_retention t ON t.queue_id = q.id
        CROSS JOIN LATERAL queen.log_retention_ages_v1(t.ttl, t.retention_seconds, t.completed_retention_seconds,
          t.retention_enabled, t.max_wait_time_seconds, p_default_seconds) a
       WHERE p.id >= v_lo AND (v_hi IS NULL OR p.id < v_hi)) s
     WHERE coalesce(s.unfinished_s, s.finished_s) IS NOT NULL
     ORDER BY s.id
  LOOP
    EXIT WHEN v_budget <= 0;
    -- The cheap probes, no lock: the first message, and a group behind it.
    v_first := NULL;
    SELECT m.seq, m.created_at INTO v_first, v_first_at FROM queen.messages m
     WHERE m.partition_id = r.id ORDER BY m.seq LIMIT 1;
    IF v_first IS NULL THEN
      SELECT p.last_seq INTO v_floor FROM queen.partitions p WHERE p.id = r.id;
    ELSE
      v_floor := v_first - 1;
    END IF;
    -- A group's row unused since this instant may be stale (queen.log_group_stale_v1).
    v_idle_before := v_now - make_interval(secs => coalesce(r.unfinished_s, r.finished_s));
    CONTINUE WHEN (v_first IS NULL OR v_first_at >= v_now - make_interval(secs => least(r.unfinished_s, r.finished_s)))
      AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c WHERE c.partition_id = r.id
                       AND (c.cursor_seq < v_floor OR queen.log_group_stale_v1(c, v_floor, v_first IS NULL, v_idle_before, v_now)))
      -- An empty partition without groups: the partition itself goes.
      AND (v_first IS NOT NULL OR EXISTS (SELECT 1 FROM queen.partition_consumers c WHERE c.partition_id = r.id));

    PERFORM 1 FROM queen.partitions p WHERE p.id = r.id FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    -- Under the lock: nothing is added at the head, so the first message and the floor hold.
    SELECT m.seq INTO v_first FROM queen.messages m WHERE m.partition_id = r.id ORDER BY m.seq LIMIT 1;
    SELECT p.last_seq INTO v_last FROM queen.partitions p WHERE p.id = r.id;
    v_floor := coalesce(v_first - 1, v_last);
    SELECT min(c.cursor_seq) INTO v_minc FROM queen.partition_consumers c WHERE c.partition_id = r.id;

    -- The walk, over the first messages (at most the batch left): the newest that is past keeping
    -- by its own rule (finished by every group: finished_s; else unfinished_s). It goes with every
    -- older message of its partition: older, so no rule wanted them longer than it (a finished
    -- message kept for completedRetentionSeconds goes early when an unfinished newer one reached
    -- maxWaitTimeSeconds; an unfinished one never goes by finished_s, being newer than every
    -- finished one).
    v_walk := NULL;
    IF v_first IS NOT NULL THEN
      SELECT max(n.seq) INTO v_walk FROM (
        SELECT m.seq, m.created_at FROM queen.messages m WHERE m.partition_id = r.id AND m.seq >= v_first
         ORDER BY m.seq LIMIT v_budget) n
       WHERE CASE WHEN n.seq <= v_minc THEN n.created_at < v_now - make_interval(secs => r.finished_s)
                  ELSE n.created_at < v_now - make_interval(secs => r.unfinished_s) END;
    END IF;
    v_target := greatest(coalesce(v_walk, v_floor), v_floor);

    -- The groups behind the target, locked where free; the prefix stops at a busy group's cursor and
    -- before a live lease's first message.
    SELECT array_agg(x.consumer_group) INTO v_locked FROM (
      SELECT c.consumer_group FROM queen.partition_consumers c
       WHERE c.partition_id = r.id AND c.cursor_seq < v_target
       ORDER BY c.consumer_group FOR NO KEY UPDATE SKIP LOCKED) x;
    SELECT min(CASE WHEN c.consumer_group <> ALL (coalesce(v_locked, '{}')) THEN c.cursor_seq
                    WHEN c.lease_id IS NOT NULL AND c.lease_expires_at > clock_timestamp()
                      THEN (SELECT min(s) - 1 FROM unnest(c.lease_seqs) s WHERE s > c.cursor_seq) END)
      INTO v_cap FROM queen.partition_consumers c WHERE c.partition_id = r.id AND c.cursor_seq < v_target;
    -- (least() skips a NULL: nothing walked is nothing to remove, whatever the cap.)
    v_upto := CASE WHEN v_walk IS NOT NULL THEN least(v_walk, v_cap) END;

    v_n := 0;
    IF v_upto IS NOT NULL AND v_upto >= v_first THEN
      WITH d AS (
        DELETE FROM queen.messages m WHERE m.partition_id = r.id AND m.seq >= v_first AND m.seq <= v_upto
        RETURNING m.seq, pg_column_size(m.payload) AS b)
      SELECT count(*)::int, count(*) FILTER (WHERE v_minc IS NULL OR d.seq > v_minc)::int, coalesce(sum(d.b), 0)
        INTO v_n, v_unf, v_bytes FROM d;
      v_budget := v_budget - v_n;
      v_removed := v_removed + v_n;
      v_unfinished := v_unfinished + v_unf;
      v_total_bytes := v_total_bytes + v_bytes;
      v_key := r.tenant_id::text || '/' || r.queue;
      v_per := jsonb_set(v_per, ARRAY[v_key], jsonb_build_object('tenant', r.tenant_id, 'queue', r.queue,
        'removed', coalesce((v_per #>> ARRAY[v_key, 'removed'])::int, 0) + v_n,
        'unfinished', coalesce((v_per #>> ARRAY[v_key, 'unfinished'])::int, 0) + v_unf,
        'bytes', coalesce((v_per #>> ARRAY[v_key, 'bytes'])::bigint, 0) + v_bytes));
      v_floor := greatest(v_floor, v_upto);
    END IF;

    -- Every locked group behind the new floor finishes what is gone: its cursor moves to the floor,
    -- and what it had finished ahead of it folds in.
    FOR g IN
      SELECT c.consumer_group, c.cursor_seq, c.done_seqs FROM queen.partition_consumers c
       WHERE c.partition_id = r.id AND c.consumer_group = ANY (coalesce(v_locked, '{}')) AND c.cursor_seq < v_floor
    LOOP
      v_cursor := v_floor;
      v_done := ARRAY(SELECT s FROM unnest(g.done_seqs) s WHERE s > v_floor ORDER BY s);
      WHILE v_cursor + 1 = ANY (v_done) LOOP
        v_cursor := v_cursor + 1;
        v_done := array_remove(v_done, v_cursor);
      END LOOP;
      UPDATE queen.partition_consumers SET cursor_seq = v_cursor, done_seqs = v_done, updated_at = v_now
       WHERE partition_id = r.id AND consumer_group = g.consumer_group;
    END LOOP;

    -- The stale rows of groups (queen.log_group_stale_v1), at most the batch left, each taken
    -- FOR UPDATE SKIP LOCKED and judged again on the version it locked: a row a pop, an ack or a
    -- lease extend holds right now is not waited for and stays this pass. Still under the
    -- partition's lock, so no group's row can be created meanwhile (its foreign key's KEY SHARE).
    EXIT WHEN v_budget <= 0;
    v_empty := NOT EXISTS (SELECT 1 FROM queen.messages m WHERE m.partition_id = r.id);
    WITH gone AS (
      DELETE FROM queen.partition_consumers d USING (
        SELECT c.consumer_group FROM queen.partition_consumers c
         WHERE c.partition_id = r.id AND queen.log_group_stale_v1(c, v_floor, v_empty, v_idle_before, clock_timestamp())
         ORDER BY c.consumer_group LIMIT v_budget
         FOR UPDATE OF c SKIP LOCKED) s
       WHERE d.partition_id = r.id AND d.consumer_group = s.consumer_group
      RETURNING d.consumer_group, d.completed, d.failures
    ), forgotten AS (
      -- The queue forgets each such group: a pop of it registers it again and reads this partition
      -- from its first message, as a group seen for the first time does (queen.log_register_group_v1).
      DELETE FROM queen.consumer_groups k USING queen.partitions p
       WHERE p.id = r.id AND k.queue_id = p.queue_id AND k.consumer_group IN (SELECT gone.consumer_group FROM gone))
    SELECT count(*)::int, coalesce(sum(gone.completed), 0), coalesce(sum(gone.failures), 0) INTO v_g, v_gc, v_gf FROM gone;
    v_groups := v_groups + v_g;
    v_gone_completed := v_gone_completed + v_gc;
    v_gone_failed := v_gone_failed + v_gf;
    v_budget := v_budget - v_g;
    -- An empty partition with no group row left goes, with what hangs on it (ON DELETE
    -- CASCADE: nothing but the rows just removed). No message can arrive meanwhile: a push needs
    -- the row's lock (FOR NO KEY UPDATE, queen.log_ensure_partition_v1 and the fast path's), which
    -- waits behind this pass's FOR UPDATE, finds the row gone and creates the partition anew.
    IF v_empty AND v_budget > 0 AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c WHERE c.partition_id = r.id) THEN
      DELETE FROM queen.partitions p WHERE p.id = r.id RETURNING p.last_seq INTO v_last;
      v_gone_pushed := v_gone_pushed + v_last;
      v_partitions := v_partitions + 1;
      v_budget := v_budget - 1;
    END IF;
  END LOOP;
  -- One row per shard, which this pass holds the claim of: sweepers never wait on each other here.
  IF v_groups > 0 OR v_partitions > 0 THEN
    INSERT INTO queen.system_state AS s (key, value, updated_at)
    VALUES ('log_removed_rows:' || p_shard, jsonb_build_object('pushed', v_gone_pushed, 'completed', v_gone_completed, 'failed', v_gone_failed), now())
    ON CONFLICT (key) DO UPDATE SET updated_at = now(), value = jsonb_build_object(
      'pushed', (s.value ->> 'pushed')::bigint + v_gone_pushed,
      'completed', (s.value ->> 'completed')::bigint + v_gone_completed,
      'failed', (s.value ->> 'failed')::bigint + v_gone_failed);
  END IF;
  RETURN jsonb_build_object('removed', v_removed, 'unfinished', v_unfinished, 'bytes', v_total_bytes,
    'groups', v_groups, 'partitions', v_partitions, 'full', v_budget <= 0,
    'queues', coalesce((SELECT jsonb_agg(e.value ORDER BY e.key) FROM jsonb_each(v_per) e), '[]'::jsonb));
END $function$
CREATE OR REPLACE FUNCTION queen.log_retention_ages_v1(p_ttl integer, p_retention integer, p_completed integer, p_enabled boolean, p_max_wait integer, p_default integer, OUT any_s integer, OUT unfinished_s integer, OUT finished_s integer)
 RETURNS record
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT a, least(a, nullif(p_max_wait, 0)), least(a, CASE WHEN p_enabled IS DISTINCT FROM false THEN nullif(p_completed, 0) END)
  FROM (SELECT least(nullif(p_ttl, 0),
    CASE WHEN p_enabled IS DISTINCT FROM false THEN nullif(coalesce(nullif(p_retention, 0), p_default), 0) END) AS a) x
$function$
CREATE OR REPLACE FUNCTION queen.log_retention_gauges_v1()
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT jsonb_build_object(
    'oldestMessageSeconds', coalesce(extract(epoch FROM now() - (
        SELECT min(o.created_at) FROM queen.partitions p,
          LATERAL (SELECT m.created_at FROM queen.messages m WHERE m.partition_id = p.id ORDER BY m.seq LIMIT 1) o
      ))::double precision, 0),
    'tables', jsonb_build_object(
      'messages', pg_total_relation_size('queen.messages'),
      'message_failures', pg_total_relation_size('queen.message_failures'),
      'message_failure_texts', pg_total_relation_size('queen.message_failure_texts'),
      'partition_consumers', pg_total_relation_size('queen.partition_consumers'),
      'partitions', pg_total_relation_size('queen.partitions')))
$function$
CREATE OR REPLACE FUNCTION queen.log_retry_delay_default_v1()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 1000 $function$
CREATE OR REPLACE FUNCTION queen.log_retry_delay_ms_v1(p_delay integer, p_max integer, p_failures integer)
 RETURNS bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN p_max <= p_delay THEN p_delay::bigint
              ELSE least(p_max::numeric, p_delay::numeric * power(2::numeric, least(greatest(p_failures - 1, 0), 40)))::bigint END
$function$
CREATE OR REPLACE FUNCTION queen.log_seal_texts_v1(p_items jsonb, p_queues text[])
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT coalesce(array_agg(CASE WHEN e->>'queue' = ANY (p_queues) THEN coalesce(e->'payload', 'null'::jsonb)::text END ORDER BY k), '{}')
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_items) = 'array' THEN p_items ELSE '[]' END) WITH ORDINALITY AS t (e, k)
$function$
CREATE OR REPLACE FUNCTION queen.log_sealed_items_v1(p_items jsonb, p_sealed jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT CASE WHEN p_sealed IS NULL OR jsonb_typeof(p_items) <> 'array' THEN p_items
    ELSE (SELECT coalesce(jsonb_agg(CASE WHEN jsonb_typeof(p_sealed->(k::int - 1)) = 'string' AND jsonb_typeof(e) = 'object'
                                         THEN e || jsonb_build_object('payload', p_sealed->(k::int - 1)) ELSE e END ORDER BY k), '[]'::jsonb)
            FROM jsonb_array_elements(p_items) WITH ORDINALITY AS t (e, k)) END
$function$
CREATE OR REPLACE FUNCTION queen.log_settle_ready_v1(p_shard smallint)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_lo UUID := (lpad(to_hex(p_shard::int << 2), 2, '0') || '000000-0000-0000-0000-000000000000')::uuid;
  v_hi UUID := CASE WHEN p_shard < 63 THEN (lpad(to_hex((p_shard::int + 1) << 2), 2, '0') || '000000-0000-0000-0000-000000000000')::uuid END;
  v_queue UUID;
  v_n INT;
  v_settled INT := 0;
BEGIN
  -- The queues with a ready partition no group row is behind in (a probe a partition, kept one by
  -- its OFFSET 0), read without a lock: most passes lock nothing. A queue no group has popped
  -- settles nothing: no pop reads it, and each message pushed into a settled partition rewrites
  -- its row.
  FOR v_queue IN SELECT DISTINCT s.queue_id FROM queen.partitions s
                  WHERE s.id >= v_lo AND (v_hi IS NULL OR s.id < v_hi) AND s.ready
                    AND EXISTS (SELECT 1 FROM queen.consumer_groups g WHERE g.queue_id = s.queue_id)
                    AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c
                                     WHERE c.partition_id = s.id AND c.cursor_seq < s.last_seq OFFSET 0) LOOP
    PERFORM 1 FROM queen.queues q WHERE q.id = v_queue FOR SHARE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    -- The rule itself, in a statement begun after the lock: every group the queue knows has a row
    -- on the partition with nothing past its cursor.
    WITH settled AS (
      UPDATE queen.partitions p SET ready = false
       WHERE p.id IN (SELECT s.id FROM queen.partitions s
                       WHERE s.queue_id = v_queue AND s.ready AND s.id >= v_lo AND (v_hi IS NULL OR s.id < v_hi)
                         AND NOT EXISTS (SELECT 1 FROM queen.consumer_groups g WHERE g.queue_id = s.queue_id
                                          AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c
                                                           WHERE c.partition_id = s.id AND c.consumer_group = g.consumer_group
                                                             AND c.cursor_seq >= s.last_seq))
                       FOR NO KEY UPDATE SKIP LOCKED)
      RETURNING 1)
    SELECT count(*)::int INTO v_n FROM settled;
    v_settled := v_settled + v_n;
  END LOOP;
  RETURN v_settled;
END $function$
CREATE OR REPLACE FUNCTION queen.log_stamp_traces_v1(p_results jsonb, p_items jsonb, p_trace jsonb, p_index integer DEFAULT NULL::integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_store_queue_v1(p_tenant uuid, p_queue text, p_lease integer, p_retry integer, p_delay integer, p_window integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_row queen.queues;
  v_delays queen.queue_delays;
BEGIN
  INSERT INTO queen.queues AS q (tenant_id, name, lease_time, retry_limit)
  VALUES (p_tenant, p_queue, coalesce(p_lease, 300), coalesce(p_retry, 3))
  ON CONFLICT (tenant_id, name) DO UPDATE SET lease_time = coalesce(p_lease, q.lease_time),
                                   retry_limit = coalesce(p_retry, q.retry_limit), updated_at = now()
  RETURNING * INTO v_row;
  IF p_delay IS NOT NULL OR p_window IS NOT NULL THEN
    INSERT INTO queen.queue_delays AS d (queue_id, delayed_processing, window_buffer)
    VALUES (v_row.id, coalesce(p_delay, 0), coalesce(p_window, 0))
    ON CONFLICT (queue_id) DO UPDATE SET delayed_processing = coalesce(p_delay, d.delayed_processing),
                                         window_buffer = coalesce(p_window, d.window_buffer)
    RETURNING * INTO v_delays;
  ELSE
    SELECT * INTO v_delays FROM queen.queue_delays d WHERE d.queue_id = v_row.id;
  END IF;
  RETURN jsonb_build_object('queueId', v_row.id, 'queue', v_row.name,
    'options', jsonb_build_object('leaseTime', v_row.lease_time, 'retryLimit', v_row.retry_limit,
      'delayedProcessing', coalesce(v_delays.delayed_processing, 0), 'windowBuffer', coalesce(v_delays.window_buffer, 0)));
END $function$
CREATE OR REPLACE FUNCTION queen.log_str_v1(p_value jsonb)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN jsonb_typeof(p_value) = 'string' THEN p_value #>> '{}' END
$function$
CREATE OR REPLACE FUNCTION queen.log_subscribe_from_v1(p_tenant uuid, p_queue text, p_partition text, p_group text, p_from timestamp with time zone)
 RETURNS void
 LANGUAGE sql
AS $function$
  SELECT queen.log_subscribe_v1(p_tenant, p_queue, p_partition, p_group, p_from, 'subscriptionFrom');
$function$
CREATE OR REPLACE FUNCTION queen.log_subscribe_new_v1(p_tenant uuid, p_queue text, p_partition text, p_group text)
 RETURNS void
 LANGUAGE sql
AS $function$
  SELECT queen.log_subscribe_v1(p_tenant, p_queue, p_partition, p_group, NULL, 'subscriptionMode new');
$function$
CREATE OR REPLACE FUNCTION queen.log_subscribe_v1(p_tenant uuid, p_queue text, p_partition text, p_group text, p_from timestamp with time zone, p_option text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  IF p_group = '__QUEUE_MODE__' THEN
    PERFORM queen.fail_v1('unsupported', p_option || ' applies to a named consumer group (consumerGroup), not to queue mode.', NULL);
  END IF;
  INSERT INTO queen.partition_consumers (partition_id, consumer_group, cursor_seq)
  SELECT p.id, p_group, CASE WHEN p_from IS NULL THEN p.last_seq
                             ELSE coalesce((SELECT max(m.seq) FROM queen.messages m WHERE m.partition_id = p.id AND m.created_at < p_from), 0) END
    FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
   WHERE q.tenant_id = p_tenant AND q.name = p_queue AND (p_partition IS NULL OR p.name = p_partition)
     FOR KEY SHARE OF p
  ON CONFLICT DO NOTHING;
END $function$
CREATE OR REPLACE FUNCTION queen.log_totals_v1()
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT jsonb_build_object(
    'pushed', (SELECT coalesce(sum(p.last_seq), 0) FROM queen.partitions p) + coalesce(sum((g.value ->> 'pushed')::bigint), 0),
    'completed', (SELECT coalesce(sum(c.completed), 0) FROM queen.partition_consumers c) + coalesce(sum((g.value ->> 'completed')::bigint), 0),
    'failed', (SELECT coalesce(sum(c.failures), 0) FROM queen.partition_consumers c) + coalesce(sum((g.value ->> 'failed')::bigint), 0))
  FROM queen.system_state g WHERE g.key LIKE 'log_removed_rows:%'
$function$
CREATE OR REPLACE FUNCTION queen.log_trace_id_v1(p_value jsonb, p_index integer)
 RETURNS uuid
 LANGUAGE plpgsql
AS $function$
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
END $function$
CREATE OR REPLACE FUNCTION queen.log_trace_max_bytes_v1()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 16384 $function$
CREATE OR REPLACE FUNCTION queen.log_traceparent_v1(p_trace uuid, p_span bytea)
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN p_trace IS NOT NULL AND octet_length(p_span) = 8
              THEN '00-' || replace(p_trace::text, '-', '') || '-' || encode(p_span, 'hex') || '-01' END
$function$
CREATE OR REPLACE FUNCTION queen.log_traces_per_message_v1()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 100 $function$
CREATE OR REPLACE FUNCTION queen.log_unconsumed_v1(p_queue_id uuid)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  RETURN (SELECT coalesce(sum(p.last_seq - coalesce((SELECT min(c.cursor_seq) FROM queen.partition_consumers c WHERE c.partition_id = p.id), 0)), 0)
            FROM queen.partitions p WHERE p.queue_id = p_queue_id);
END $function$
CREATE OR REPLACE FUNCTION queen.log_whole_option_v1(p_options jsonb, p_key text, p_lo integer, p_hi integer, p_code text, p_message text)
 RETURNS integer
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  IF NOT p_options ? p_key THEN
    RETURN NULL;
  END IF;
  IF jsonb_typeof(p_options->p_key) <> 'number' OR (p_options->>p_key)::numeric NOT BETWEEN p_lo AND p_hi
     OR (p_options->>p_key)::numeric <> trunc((p_options->>p_key)::numeric) THEN
    PERFORM queen.fail_v1(p_code, p_message, NULL);
  END IF;
  RETURN (p_options->>p_key)::numeric::int;
END $function$
CREATE OR REPLACE FUNCTION queen.log_whole_options_v1(p_options jsonb, p_keys text[])
 RETURNS integer[]
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  b RECORD;
  v_out INT[] := '{}';
BEGIN
  FOR b IN SELECT o.* FROM unnest(p_keys) WITH ORDINALITY AS k (key, n) JOIN queen.log_option_bounds_v1() o ON o.key = k.key ORDER BY k.n LOOP
    v_out := v_out || queen.log_whole_option_v1(p_options, b.key, b.lo, b.hi, b.code, b.message);
  END LOOP;
  RETURN v_out;
END $function$
CREATE OR REPLACE FUNCTION queen.migrate_under_brief_lock_v1(p_statements text[], p_what text)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_attempt INT := 0;
  v_lock_timeout TEXT := current_setting('lock_timeout');
  v_statement TEXT;
BEGIN
  LOOP
    BEGIN
      PERFORM set_config('lock_timeout', '200ms', true);
      FOREACH v_statement IN ARRAY p_statements LOOP
        EXECUTE v_statement;
      END LOOP;
      EXIT;
    EXCEPTION WHEN lock_not_available THEN
      v_attempt := v_attempt + 1;
      IF v_attempt >= 50 THEN
        RAISE EXCEPTION '% once, under a brief lock, and 50 attempts of 200 ms each found the table held; boot again when the transactions holding it have ended', p_what;
      END IF;
    END;
    PERFORM pg_sleep(0.1);
  END LOOP;
  PERFORM set_config('lock_timeout', v_lock_timeout, true);
END $function$
CREATE OR REPLACE FUNCTION queen.name_ok_v1(p_name text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT p_name ~ '^[A-Za-z0-9_][A-Za-z0-9_.:-]*$' AND length(p_name) <= 128
$function$
CREATE OR REPLACE FUNCTION queen.operator_check_key_v1(p_ns text, p_key text)
 RETURNS void
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
  PERFORM queen.check_name_v1(p_ns, 'kv_invalid_namespace', 'A namespace');
  IF p_key IS NULL OR p_key = '' THEN
    PERFORM queen.fail_v1('kv_key_required', format('A key is 1 to %s bytes of UTF-8.', queen.kv_max_key_bytes_v1()), NULL);
  END IF;
  IF NOT queen.kv_key_ok_v1(p_key) THEN
    PERFORM queen.fail_v1('kv_key_too_long', format('The key is %s bytes of UTF-8; at most %s are allowed.',
      octet_length(p_key), queen.kv_max_key_bytes_v1()), NULL);
  END IF;
END $function$
CREATE OR REPLACE FUNCTION queen.operator_dead_letter_v1(p_tenant uuid, p_action text, p_partition_id text, p_transaction_id text, p_group text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_m RECORD;
  v_g TEXT;
  v_out JSONB := '[]'::jsonb;
BEGIN
  IF p_group IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  END IF;
  SELECT * INTO v_m FROM queen.operator_find_message_v1(p_tenant, p_partition_id, p_transaction_id);
  FOR v_g IN
    SELECT f.consumer_group FROM queen.message_failures f
     WHERE f.partition_id = v_m.partition_id AND f.seq = v_m.seq AND f.dead_lettered_at IS NOT NULL
       AND (p_group IS NULL OR f.consumer_group = p_group)
     ORDER BY f.consumer_group
  LOOP
    v_out := v_out || jsonb_build_object('consumerGroup', v_g, 'outcome',
      CASE p_action WHEN 'requeue' THEN queen.operator_requeue_one_v1(v_m.partition_id, v_g, v_m.seq)
                    ELSE queen.operator_discard_one_v1(v_m.partition_id, v_g, v_m.seq) END);
  END LOOP;
  RETURN jsonb_build_object('queue', v_m.queue, 'partition', v_m.partition, 'partitionId', v_m.partition_id,
                            'transactionId', p_transaction_id, 'action', p_action, 'groups', v_out);
END $function$
CREATE OR REPLACE FUNCTION queen.operator_dead_letters_v1(p_tenant uuid, p_action text, p_queue text, p_group text, p_limit integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_q queen.queues := queen.operator_queue_v1(p_tenant, p_queue);
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_r RECORD;
  v_outcome TEXT;
  v_done INT := 0;
  v_far INT := 0;
  v_remaining BIGINT;
BEGIN
  IF p_group IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  END IF;
  FOR v_r IN
    SELECT d.partition_id, d.consumer_group, d.seq FROM (
      SELECT f.partition_id, f.consumer_group, f.seq, f.dead_lettered_at FROM queen.message_failures f
        JOIN queen.partitions p ON p.id = f.partition_id
       WHERE p.queue_id = v_q.id AND f.dead_lettered_at IS NOT NULL AND (p_group IS NULL OR f.consumer_group = p_group)
       ORDER BY f.dead_lettered_at, f.partition_id, f.seq LIMIT v_limit) d
     ORDER BY d.partition_id, d.consumer_group, d.seq
  LOOP
    v_outcome := CASE p_action WHEN 'requeue' THEN queen.operator_requeue_one_v1(v_r.partition_id, v_r.consumer_group, v_r.seq)
                               ELSE queen.operator_discard_one_v1(v_r.partition_id, v_r.consumer_group, v_r.seq) END;
    IF v_outcome IN ('requeued', 'discarded') THEN v_done := v_done + 1; END IF;
    IF v_outcome = 'cursor_too_far' THEN v_far := v_far + 1; END IF;
  END LOOP;
  SELECT count(*) INTO v_remaining FROM queen.message_failures f JOIN queen.partitions p ON p.id = f.partition_id
   WHERE p.queue_id = v_q.id AND f.dead_lettered_at IS NOT NULL AND (p_group IS NULL OR f.consumer_group = p_group);
  RETURN jsonb_build_object('queue', v_q.name, 'consumerGroup', p_group, 'action', p_action,
    CASE p_action WHEN 'requeue' THEN 'requeued' ELSE 'discarded' END, v_done, 'cursorTooFar', v_far, 'remaining', v_remaining);
END $function$
CREATE OR REPLACE FUNCTION queen.operator_discard_one_v1(p_partition_id uuid, p_group text, p_seq bigint)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM 1 FROM queen.partition_consumers c WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group FOR UPDATE;
  DELETE FROM queen.message_failure_texts t WHERE t.partition_id = p_partition_id AND t.consumer_group = p_group AND t.seq = p_seq
     AND EXISTS (SELECT 1 FROM queen.message_failures f WHERE f.partition_id = t.partition_id AND f.consumer_group = t.consumer_group
                   AND f.seq = t.seq AND f.dead_lettered_at IS NOT NULL);
  DELETE FROM queen.message_failures f
   WHERE f.partition_id = p_partition_id AND f.consumer_group = p_group AND f.seq = p_seq AND f.dead_lettered_at IS NOT NULL;
  RETURN CASE WHEN FOUND THEN 'discarded' ELSE 'absent' END;
END $function$
CREATE OR REPLACE FUNCTION queen.operator_find_message_v1(p_tenant uuid, p_partition_id text, p_transaction_id text)
 RETURNS TABLE(partition_id uuid, seq bigint, queue text, partition text, queue_id uuid)
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  IF NOT queen.uuid_ok_v1(p_partition_id) THEN
    PERFORM queen.fail_v1('log_invalid_partition_id', 'partitionId is a partition''s UUID.', NULL);
  END IF;
  IF p_transaction_id IS NULL OR p_transaction_id = '' OR octet_length(p_transaction_id) > queen.log_max_transaction_id_bytes_v1() THEN
    PERFORM queen.fail_v1('log_transaction_id_required',
      format('transactionId is 1 to %s bytes.', queen.log_max_transaction_id_bytes_v1()), NULL);
  END IF;
  RETURN QUERY
    SELECT m.partition_id, m.seq, q.name::text, p.name::text, q.id
      FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
     WHERE m.partition_id = p_partition_id::uuid AND m.transaction_id = p_transaction_id AND q.tenant_id = p_tenant;
  IF NOT FOUND THEN
    PERFORM queen.fail_v1('operator_not_found', 'This tenant has no message with that partitionId and transactionId.', NULL);
  END IF;
END $function$
CREATE OR REPLACE FUNCTION queen.operator_groups_v1(p_queue_id uuid, p_partition_id uuid, p_group text DEFAULT NULL::text)
 RETURNS TABLE(partition_id uuid, consumer_group text, cursor_seq bigint, backlog bigint, oldest_at timestamp with time zone, lease_expires_at timestamp with time zone, dead_letters bigint)
 LANGUAGE sql
 STABLE
AS $function$
  WITH parts AS (
    SELECT p.id, p.last_seq,
           coalesce((SELECT m0.seq - 1 FROM queen.messages m0 WHERE m0.partition_id = p.id ORDER BY m0.seq LIMIT 1), p.last_seq) AS floor
      FROM queen.partitions p
     WHERE p.queue_id = p_queue_id AND (p_partition_id IS NULL OR p.id = p_partition_id)
  ), groups AS (
    SELECT DISTINCT c.consumer_group FROM queen.partition_consumers c JOIN parts ON parts.id = c.partition_id WHERE p_group IS NULL
    UNION ALL
    SELECT '__QUEUE_MODE__' COLLATE "C" WHERE p_group IS NULL
       AND NOT EXISTS (SELECT 1 FROM queen.partition_consumers c JOIN parts ON parts.id = c.partition_id)
    UNION ALL
    SELECT p_group COLLATE "C" WHERE p_group IS NOT NULL
  )
  SELECT p.id, g.consumer_group::text, coalesce(c.cursor_seq, 0),
         greatest(p.last_seq - greatest(coalesce(c.cursor_seq, 0), p.floor)
                  - coalesce((SELECT count(*) FROM unnest(c.done_seqs) d WHERE d > p.floor), 0), 0)::bigint,
         (SELECT m.created_at FROM queen.messages m
           WHERE m.partition_id = p.id AND m.seq > greatest(coalesce(c.cursor_seq, 0), p.floor)
             AND m.seq <> ALL (coalesce(c.done_seqs, '{}')) ORDER BY m.seq LIMIT 1),
         CASE WHEN c.lease_expires_at > clock_timestamp() THEN c.lease_expires_at END,
         (SELECT count(*) FROM queen.message_failures f
           WHERE f.partition_id = p.id AND f.consumer_group = g.consumer_group AND f.dead_lettered_at IS NOT NULL)
    FROM parts p CROSS JOIN groups g
    LEFT JOIN queen.partition_consumers c ON c.partition_id = p.id AND c.consumer_group = g.consumer_group
$function$
CREATE OR REPLACE FUNCTION queen.operator_kv_delete_v1(p_tenant uuid, p_ns text, p_key text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM queen.operator_check_key_v1(p_ns, p_key);
  RETURN jsonb_build_object('namespace', p_ns, 'key', p_key,
    'deleted', (queen.kv_delete_key_v1(p_tenant, 0, 'delete', p_ns, p_key, NULL, clock_timestamp()) ->> 'applied')::boolean);
END $function$
CREATE OR REPLACE FUNCTION queen.operator_kv_key_v1(p_tenant uuid, p_ns text, p_key text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_out JSONB;
BEGIN
  PERFORM queen.operator_check_key_v1(p_ns, p_key);
  SELECT jsonb_build_object('namespace', kv.namespace, 'key', kv.key, 'value', kv.value, 'version', kv.version,
                            'expiresAt', queen.ts_v1(kv.expires_at), 'createdAt', queen.ts_v1(kv.created_at),
                            'updatedAt', queen.ts_v1(kv.updated_at), 'bytes', octet_length(kv.value::text))
    INTO v_out
    FROM queen.kv kv
   WHERE kv.tenant_id = p_tenant AND kv.namespace = p_ns AND kv.key = p_key AND queen.kv_live_v1(kv.expires_at, clock_timestamp());
  IF v_out IS NULL THEN
    PERFORM queen.fail_v1('operator_not_found', format('Namespace %s has no live key of that name.', p_ns), NULL);
  END IF;
  RETURN v_out;
END $function$
CREATE OR REPLACE FUNCTION queen.operator_kv_keys_v1(p_tenant uuid, p_ns text, p_prefix text, p_after text, p_limit integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_prefix TEXT := coalesce(p_prefix, '');
  v_upper TEXT;
  v_now TIMESTAMPTZ := clock_timestamp();
  v_rows JSONB;
BEGIN
  PERFORM queen.check_name_v1(p_ns, 'kv_invalid_namespace', 'A namespace');
  IF octet_length(v_prefix) > queen.kv_max_key_bytes_v1() OR octet_length(coalesce(p_after, '')) > queen.kv_max_key_bytes_v1() THEN
    PERFORM queen.fail_v1('kv_key_too_long', format('A prefix or after is at most %s bytes, the longest key.', queen.kv_max_key_bytes_v1()), NULL);
  END IF;
  v_upper := CASE WHEN v_prefix = '' THEN NULL
                  ELSE coalesce(queen.kv_prefix_upper_v1(v_prefix), v_prefix || repeat(chr(1114111), queen.kv_max_key_bytes_v1() / 4 + 1)) END;
  WITH page AS (
    SELECT kv.key, kv.version, kv.expires_at, kv.updated_at, pg_column_size(kv.value) AS bytes FROM queen.kv kv
     WHERE kv.tenant_id = p_tenant AND kv.namespace = p_ns
       AND kv.key >= v_prefix AND kv.key > coalesce(p_after, '') AND (v_upper IS NULL OR kv.key < v_upper)
       AND starts_with(kv.key, v_prefix) AND queen.kv_live_v1(kv.expires_at, v_now)
     ORDER BY kv.key LIMIT v_limit
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object('key', k.key, 'version', k.version, 'expiresAt', queen.ts_v1(k.expires_at),
                                               'updatedAt', queen.ts_v1(k.updated_at), 'bytes', k.bytes) ORDER BY k.key), '[]'::jsonb)
    INTO v_rows FROM page k;
  RETURN jsonb_build_object('namespace', p_ns, 'prefix', v_prefix, 'keys', v_rows,
                            'next', queen.operator_next_v1(v_rows, v_limit, v_rows -> -1 -> 'key'));
END $function$
CREATE OR REPLACE FUNCTION queen.operator_max_page_v1()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 1000 $function$
CREATE OR REPLACE FUNCTION queen.operator_max_payload_bytes_v1()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 1048576 $function$
CREATE OR REPLACE FUNCTION queen.operator_message_v1(p_tenant uuid, p_partition_id text, p_transaction_id text)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_m RECORD;
  v_out JSONB;
BEGIN
  SELECT * INTO v_m FROM queen.operator_find_message_v1(p_tenant, p_partition_id, p_transaction_id);
  SELECT jsonb_build_object(
           'id', queen.log_message_id_v1(m.partition_id, m.seq), 'seq', m.seq, 'transactionId', m.transaction_id,
           'partitionId', m.partition_id, 'queue', v_m.queue, 'partition', v_m.partition, 'createdAt', queen.ts_v1(m.created_at),
           'traceId', m.trace_id, 'traceparent', queen.log_traceparent_v1(m.trace_id, m.span_id),
           'bytes', coalesce(octet_length(m.payload::text), 0),
           'data', CASE WHEN coalesce(octet_length(m.payload::text), 0) <= queen.operator_max_payload_bytes_v1() THEN m.payload END,
           'dataOmitted', coalesce(octet_length(m.payload::text), 0) > queen.operator_max_payload_bytes_v1(),
           'groups', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'consumerGroup', c.consumer_group,
                        'state', CASE WHEN f.dead_lettered_at IS NOT NULL THEN 'deadLettered'
                                      WHEN m.seq <= c.cursor_seq OR m.seq = ANY (c.done_seqs) THEN 'consumed'
                                      WHEN c.lease_expires_at > clock_timestamp() AND m.seq = ANY (c.lease_seqs) THEN 'leased'
                                      ELSE 'pending' END,
                        'failures', coalesce(f.failures, 0), 'lastFailedAt', queen.ts_v1(f.last_failed_at),
                        'deadLetteredAt', queen.ts_v1(f.dead_lettered_at), 'errorMessage', t.error_message)
                        ORDER BY c.consumer_group), '[]'::jsonb)
                        FROM (SELECT * FROM queen.partition_consumers c0 WHERE c0.partition_id = m.partition_id
                               ORDER BY c0.consumer_group LIMIT queen.operator_max_page_v1()) c
                        LEFT JOIN queen.message_failures f ON f.partition_id = c.partition_id AND f.consumer_group = c.consumer_group AND f.seq = m.seq
                        LEFT JOIN queen.message_failure_texts t ON t.partition_id = c.partition_id AND t.consumer_group = c.consumer_group AND t.seq = m.seq))
         || CASE WHEN EXISTS (SELECT 1 FROM queen.sealed_messages s WHERE s.partition_id = m.partition_id AND s.seq = m.seq)
                 THEN '{"sealed": true}'::jsonb ELSE '{"sealed": false}'::jsonb END
    INTO v_out
    FROM queen.messages m WHERE m.partition_id = v_m.partition_id AND m.seq = v_m.seq;
  RETURN v_out;
END $function$
CREATE OR REPLACE FUNCTION queen.operator_messages_v1(p_tenant uuid, p_queue text, p_partition text, p_order text, p_after bigint, p_limit integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_q queen.queues := queen.operator_queue_v1(p_tenant, p_queue);
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_order TEXT := coalesce(p_order, 'newest');
  v_pid UUID;
  v_rows JSONB;
BEGIN
  PERFORM queen.check_name_v1(p_partition, 'log_invalid_partition', 'A partition name');
  IF v_order NOT IN ('newest', 'oldest') THEN
    PERFORM queen.fail_v1('operator_invalid_order', 'order is newest or oldest.', NULL);
  END IF;
  SELECT p.id INTO v_pid FROM queen.partitions p WHERE p.queue_id = v_q.id AND p.name = p_partition;
  IF v_pid IS NULL THEN
    PERFORM queen.fail_v1('operator_not_found', format('Queue %s has no partition %s.', p_queue, p_partition), NULL);
  END IF;
  WITH picked AS (
    (SELECT m.* FROM queen.messages m
      WHERE v_order = 'newest' AND m.partition_id = v_pid AND m.seq < coalesce(p_after, 9223372036854775807)
      ORDER BY m.seq DESC LIMIT v_limit)
    UNION ALL
    (SELECT m.* FROM queen.messages m
      WHERE v_order = 'oldest' AND m.partition_id = v_pid AND m.seq > coalesce(p_after, 0)
      ORDER BY m.seq LIMIT v_limit)
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'seq', m.seq, 'id', queen.log_message_id_v1(m.partition_id, m.seq), 'transactionId', m.transaction_id,
           'createdAt', queen.ts_v1(m.created_at), 'bytes', coalesce(pg_column_size(m.payload), 0),
           'sealed', EXISTS (SELECT 1 FROM queen.sealed_messages s WHERE s.partition_id = m.partition_id AND s.seq = m.seq),
           'deadLetters', (SELECT count(*) FROM queen.message_failures f
                            WHERE f.partition_id = m.partition_id AND f.seq = m.seq AND f.dead_lettered_at IS NOT NULL))
           ORDER BY CASE WHEN v_order = 'newest' THEN -m.seq ELSE m.seq END), '[]'::jsonb)
    INTO v_rows FROM picked m;
  RETURN jsonb_build_object('queue', v_q.name, 'partition', p_partition, 'partitionId', v_pid, 'order', v_order,
                            'messages', v_rows,
                            'next', queen.operator_next_v1(v_rows, v_limit, to_jsonb(v_rows -> -1 ->> 'seq')));
END $function$
CREATE OR REPLACE FUNCTION queen.operator_next_v1(p_rows jsonb, p_limit integer, p_cursor jsonb)
 RETURNS jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT CASE WHEN jsonb_array_length(p_rows) = p_limit THEN p_cursor END $function$
CREATE OR REPLACE FUNCTION queen.operator_overview_v1(p_late_seconds integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_now TIMESTAMPTZ := now();
  v_late TIMESTAMPTZ;
  v_samples JSONB;
  v_newest JSONB;
  v_windows JSONB := '{}';
  v_then JSONB;
  v_w INT;
BEGIN
  IF p_late_seconds IS NOT NULL AND (p_late_seconds < 0 OR p_late_seconds > 86400) THEN
    PERFORM queen.fail_v1('operator_invalid_state', 'lateSeconds is a whole number from 0 to 86400.', NULL);
  END IF;
  v_late := v_now - make_interval(secs => coalesce(p_late_seconds, 60));
  SELECT s.value INTO v_samples FROM queen.system_state s WHERE s.key = 'log_throughput';
  IF jsonb_typeof(v_samples) = 'array' AND jsonb_array_length(v_samples) > 0 THEN
    v_newest := v_samples -> -1;
    FOREACH v_w IN ARRAY ARRAY[60, 300] LOOP
      SELECT e INTO v_then FROM jsonb_array_elements(v_samples) e
       WHERE (e ->> 'atMs')::bigint <= (v_newest ->> 'atMs')::bigint - v_w * 1000
       ORDER BY (e ->> 'atMs')::bigint DESC LIMIT 1;
      IF v_then IS NULL THEN v_then := v_samples -> 0; END IF;
      v_windows := v_windows || jsonb_build_object(v_w::text, CASE WHEN v_then = v_newest THEN NULL ELSE jsonb_build_object(
        'spanSeconds', ((v_newest ->> 'atMs')::bigint - (v_then ->> 'atMs')::bigint) / 1000,
        'pushed', greatest(0, (v_newest ->> 'pushed')::bigint - (v_then ->> 'pushed')::bigint),
        'completed', greatest(0, (v_newest ->> 'completed')::bigint - (v_then ->> 'completed')::bigint),
        'failed', greatest(0, (v_newest ->> 'failed')::bigint - (v_then ->> 'failed')::bigint)) END);
      v_then := NULL;
    END LOOP;
  END IF;
  RETURN jsonb_build_object(
    'now', queen.ts_v1(v_now),
    'sweepers', (SELECT coalesce(jsonb_agg(x.r ORDER BY x.key), '[]'::jsonb) FROM (
        SELECT s.key, jsonb_build_object('id', substr(s.key, 9), 'reportedAt', queen.ts_v1(s.updated_at),
                 'silentSeconds', floor(extract(epoch FROM v_now - s.updated_at))::int) || s.value AS r
          FROM queen.system_state s WHERE s.key LIKE 'sweeper:%' AND s.updated_at >= v_now - interval '1 hour'
         ORDER BY s.key LIMIT 50) x),
    'throughput', CASE WHEN v_newest IS NULL THEN NULL ELSE jsonb_build_object(
        'sampledAt', queen.ts_v1(to_timestamp((v_newest ->> 'atMs')::bigint / 1000.0)),
        'lastMinute', v_windows -> '60', 'last5Minutes', v_windows -> '300') END,
    'timers', jsonb_build_object(
        'due', (SELECT count(*) FROM (SELECT 1 FROM queen.log_timers t WHERE t.deliver_at <= v_now LIMIT 100000) d),
        'late', (SELECT count(*) FROM (SELECT 1 FROM queen.log_timers t WHERE t.deliver_at <= v_late LIMIT 100000) l),
        'countedUpTo', 100000,
        'lateSeconds', coalesce(p_late_seconds, 60),
        'oldestDueSeconds', (SELECT floor(extract(epoch FROM v_now - t.deliver_at))::bigint FROM queen.log_timers t
                              WHERE t.deliver_at <= v_now ORDER BY t.deliver_at LIMIT 1)),
    'connections', jsonb_build_object(
        'maxConnections', current_setting('max_connections')::int,
        'server', (SELECT count(*) FROM pg_stat_activity a WHERE a.backend_type = 'client backend'),
        'groups', (SELECT coalesce(jsonb_agg(g.r ORDER BY g.app, g.state), '[]'::jsonb) FROM (
            SELECT coalesce(a.application_name, '') AS app, coalesce(a.state, '') AS state,
                   jsonb_build_object('applicationName', coalesce(a.application_name, ''), 'state', coalesce(a.state, ''), 'connections', count(*)) AS r
              FROM pg_stat_activity a
             WHERE a.datname = current_database() AND a.backend_type = 'client backend'
             GROUP BY 1, 2 ORDER BY 1, 2 LIMIT 50) g)));
END $function$
CREATE OR REPLACE FUNCTION queen.operator_page_v1(p_limit integer, p_default integer)
 RETURNS integer
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
  IF p_limit IS NULL THEN RETURN p_default; END IF;
  IF p_limit < 1 OR p_limit > queen.operator_max_page_v1() THEN
    PERFORM queen.fail_v1('operator_invalid_limit', format('limit is a whole number from 1 to %s.', queen.operator_max_page_v1()), NULL);
  END IF;
  RETURN p_limit;
END $function$
CREATE OR REPLACE FUNCTION queen.operator_partitions_v1(p_tenant uuid, p_queue text, p_after text, p_limit integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_q queen.queues := queen.operator_queue_v1(p_tenant, p_queue);
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_rows JSONB;
BEGIN
  WITH page AS (
    SELECT p.* FROM queen.partitions p
     WHERE p.queue_id = v_q.id AND p.name > coalesce(p_after, '')
     ORDER BY p.name LIMIT v_limit
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'name', p.name, 'partitionId', p.id, 'lastSeq', p.last_seq, 'createdAt', queen.ts_v1(p.created_at),
           'groups', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'consumerGroup', g.consumer_group, 'cursor', g.cursor_seq, 'backlog', g.backlog,
                        'oldestUnconsumedAt', queen.ts_v1(g.oldest_at),
                        'oldestUnconsumedSeconds', CASE WHEN g.oldest_at IS NOT NULL
                          THEN round(extract(epoch FROM clock_timestamp() - g.oldest_at)::numeric, 3) END,
                        'leaseExpiresAt', queen.ts_v1(g.lease_expires_at), 'deadLetters', g.dead_letters)
                        ORDER BY g.consumer_group), '[]'::jsonb)
                        FROM queen.operator_groups_v1(v_q.id, p.id) g))
           ORDER BY p.name), '[]'::jsonb)
    INTO v_rows FROM page p;
  RETURN jsonb_build_object('queue', v_q.name, 'partitions', v_rows,
                            'next', queen.operator_next_v1(v_rows, v_limit, v_rows -> -1 -> 'name'));
END $function$
CREATE OR REPLACE FUNCTION queen.operator_queue_v1(p_tenant uuid, p_queue text)
 RETURNS queen.queues
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_q queen.queues;
BEGIN
  PERFORM queen.check_name_v1(p_queue, 'log_invalid_queue', 'A queue name');
  SELECT * INTO v_q FROM queen.queues q WHERE q.tenant_id = p_tenant AND q.name = p_queue;
  IF v_q.id IS NULL THEN
    PERFORM queen.fail_v1('operator_not_found', format('This tenant has no queue %s.', p_queue), NULL);
  END IF;
  RETURN v_q;
END $function$
CREATE OR REPLACE FUNCTION queen.operator_queues_v1(p_tenant uuid, p_after text, p_limit integer)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  WITH size AS (SELECT queen.operator_page_v1(p_limit, 50) AS n),
  page AS (
    SELECT q.* FROM queen.queues q
     WHERE q.tenant_id = p_tenant AND q.name > coalesce(p_after, '')
     ORDER BY q.name LIMIT (SELECT n FROM size)
  ),
  answer AS (SELECT coalesce(jsonb_agg(jsonb_build_object(
           'name', q.name, 'createdAt', queen.ts_v1(q.created_at), 'leaseTime', q.lease_time, 'retryLimit', q.retry_limit,
           'partitions', (SELECT count(*) FROM queen.partitions p WHERE p.queue_id = q.id),
           'deadLetters', coalesce((SELECT sum(g.dead_letters) FROM queen.operator_groups_v1(q.id, NULL) g), 0),
           'groups', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                        'consumerGroup', s.consumer_group, 'backlog', s.backlog, 'deadLetters', s.dead_letters,
                        'oldestUnconsumedAt', queen.ts_v1(s.oldest_at),
                        'oldestUnconsumedSeconds', CASE WHEN s.oldest_at IS NOT NULL
                          THEN round(extract(epoch FROM clock_timestamp() - s.oldest_at)::numeric, 3) END)
                        ORDER BY s.consumer_group), '[]'::jsonb)
                        FROM (SELECT g.consumer_group, sum(g.backlog)::bigint AS backlog, sum(g.dead_letters)::bigint AS dead_letters,
                                     min(g.oldest_at) AS oldest_at
                                FROM queen.operator_groups_v1(q.id, NULL) g GROUP BY g.consumer_group) s))
           ORDER BY q.name), '[]'::jsonb) AS r FROM page q)
  SELECT jsonb_build_object('queues', a.r, 'next', queen.operator_next_v1(a.r, s.n, a.r -> -1 -> 'name')) FROM answer a, size s
$function$
CREATE OR REPLACE FUNCTION queen.operator_requeue_max_gap_v1()
 RETURNS integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT 10000 $function$
CREATE OR REPLACE FUNCTION queen.operator_requeue_one_v1(p_partition_id uuid, p_group text, p_seq bigint)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_pc queen.partition_consumers;
BEGIN
  SELECT * INTO v_pc FROM queen.partition_consumers c
   WHERE c.partition_id = p_partition_id AND c.consumer_group = p_group FOR UPDATE;
  PERFORM 1 FROM queen.message_failures f
   WHERE f.partition_id = p_partition_id AND f.consumer_group = p_group AND f.seq = p_seq AND f.dead_lettered_at IS NOT NULL
   FOR UPDATE;
  IF NOT FOUND THEN RETURN 'absent'; END IF;
  IF v_pc.partition_id IS NOT NULL THEN
    IF p_seq <= v_pc.cursor_seq THEN
      IF v_pc.cursor_seq - p_seq + cardinality(v_pc.done_seqs) > queen.operator_requeue_max_gap_v1() THEN
        RETURN 'cursor_too_far';
      END IF;
      v_pc.done_seqs := v_pc.done_seqs || ARRAY(SELECT generate_series(p_seq + 1, v_pc.cursor_seq));
      v_pc.cursor_seq := p_seq - 1;
    ELSE
      v_pc.done_seqs := array_remove(v_pc.done_seqs, p_seq);
    END IF;
    IF p_seq = ANY (v_pc.lease_seqs) AND NOT p_seq = ANY (v_pc.lease_failed) THEN
      v_pc.lease_failed := v_pc.lease_failed || p_seq;
    END IF;
    UPDATE queen.partition_consumers
       SET cursor_seq = v_pc.cursor_seq, done_seqs = v_pc.done_seqs, lease_failed = v_pc.lease_failed, updated_at = clock_timestamp()
     WHERE partition_id = p_partition_id AND consumer_group = p_group;
    -- The group is behind here again: its queue forgets it, and its next pop registers it, making
    -- this partition ready if a sweeper settled it (queen.log_register_group_v1).
    DELETE FROM queen.consumer_groups g USING queen.partitions p
     WHERE p.id = p_partition_id AND g.queue_id = p.queue_id AND g.consumer_group = p_group;
  END IF;
  DELETE FROM queen.message_failure_texts WHERE partition_id = p_partition_id AND consumer_group = p_group AND seq = p_seq;
  DELETE FROM queen.message_failures WHERE partition_id = p_partition_id AND consumer_group = p_group AND seq = p_seq;
  RETURN 'requeued';
END $function$
CREATE OR REPLACE FUNCTION queen.operator_skip_v1(p_tenant uuid, p_queue text, p_group text, p_partition text)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_q queen.queues := queen.operator_queue_v1(p_tenant, p_queue);
  v_skipped BIGINT;
  v_n INT;
BEGIN
  PERFORM queen.check_name_v1(p_group, 'log_invalid_consumer_group', 'A consumer group');
  IF p_partition IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_partition, 'log_invalid_partition', 'A partition name');
    IF NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.queue_id = v_q.id AND p.name = p_partition) THEN
      PERFORM queen.fail_v1('operator_not_found', format('Queue %s has no partition %s.', p_queue, p_partition), NULL);
    END IF;
  END IF;
  PERFORM 1 FROM queen.partition_consumers c JOIN queen.partitions p ON p.id = c.partition_id
   WHERE p.queue_id = v_q.id AND (p_partition IS NULL OR p.name = p_partition) AND c.consumer_group = p_group
   ORDER BY c.partition_id FOR UPDATE OF c;
  SELECT coalesce(sum(g.backlog), 0) INTO v_skipped
    FROM queen.partitions p, queen.operator_groups_v1(v_q.id, p.id, p_group) g
   WHERE p.queue_id = v_q.id AND (p_partition IS NULL OR p.name = p_partition);
  WITH moved AS (
    INSERT INTO queen.partition_consumers AS c (partition_id, consumer_group, cursor_seq)
    SELECT p.id, p_group, p.last_seq FROM queen.partitions p
     WHERE p.queue_id = v_q.id AND (p_partition IS NULL OR p.name = p_partition)
     ORDER BY p.id
     -- A partition being removed (retention, or its queue's delete) is waited for and skipped.
     FOR KEY SHARE OF p
    ON CONFLICT (partition_id, consumer_group) DO UPDATE
       SET cursor_seq = greatest(c.cursor_seq, EXCLUDED.cursor_seq), done_seqs = '{}', lease_id = NULL, lease_expires_at = NULL,
           lease_seqs = '{}', lease_failed = '{}', updated_at = clock_timestamp()
    RETURNING 1)
  SELECT count(*) INTO v_n FROM moved;
  DELETE FROM queen.consumer_retry_at r USING queen.partitions p
   WHERE r.partition_id = p.id AND p.queue_id = v_q.id AND (p_partition IS NULL OR p.name = p_partition) AND r.consumer_group = p_group;
  RETURN jsonb_build_object('queue', v_q.name, 'consumerGroup', p_group, 'partition', p_partition, 'partitions', v_n, 'skipped', v_skipped);
END $function$
CREATE OR REPLACE FUNCTION queen.operator_tenants_v1(p_only uuid, p_after uuid, p_limit integer)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  WITH size AS (SELECT queen.operator_page_v1(p_limit, 100) AS n),
  ids AS (
    SELECT t.tenant_id FROM (
      (SELECT k.tenant_id FROM queen.kv_quota k WHERE k.tenant_id > coalesce(p_after, '00000000-0000-0000-0000-000000000000')
         AND (p_only IS NULL OR k.tenant_id = p_only) ORDER BY 1 LIMIT (SELECT n FROM size))
      UNION
      (SELECT u.tenant_id FROM queen.kv_usage u WHERE u.tenant_id > coalesce(p_after, '00000000-0000-0000-0000-000000000000')
         AND (p_only IS NULL OR u.tenant_id = p_only) ORDER BY 1 LIMIT (SELECT n FROM size))
      UNION
      (SELECT DISTINCT q.tenant_id FROM queen.queues q WHERE q.tenant_id > coalesce(p_after, '00000000-0000-0000-0000-000000000000')
         AND (p_only IS NULL OR q.tenant_id = p_only) ORDER BY 1 LIMIT (SELECT n FROM size))
    ) t ORDER BY 1 LIMIT (SELECT n FROM size)
  ),
  answer AS (SELECT coalesce(jsonb_agg(jsonb_build_object(
           'tenantId', i.tenant_id,
           'grant', CASE WHEN k.tenant_id IS NOT NULL THEN jsonb_build_object(
                      'granted', k.granted, 'enabled', k.enabled, 'maxRows', k.max_rows, 'maxBytes', k.max_bytes,
                      'maxTimers', k.max_timers, 'updatedAt', queen.ts_v1(k.updated_at)) END,
           'usage', CASE WHEN u.tenant_id IS NOT NULL THEN jsonb_build_object(
                      'rows', u.rows, 'bytes', u.bytes, 'timers', u.timers, 'timerBytes', u.timer_bytes,
                      'computedAt', queen.ts_v1(u.computed_at)) END,
           'queues', (SELECT count(*) FROM queen.queues q WHERE q.tenant_id = i.tenant_id),
           'overQuota', coalesce(u.rows >= k.max_rows OR u.bytes >= k.max_bytes OR u.timers >= k.max_timers, false))
           ORDER BY i.tenant_id), '[]'::jsonb) AS r
    FROM ids i LEFT JOIN queen.kv_quota k ON k.tenant_id = i.tenant_id LEFT JOIN queen.kv_usage u ON u.tenant_id = i.tenant_id)
  SELECT jsonb_build_object('tenants', a.r, 'next', queen.operator_next_v1(a.r, s.n, a.r -> -1 -> 'tenantId')) FROM answer a, size s
$function$
CREATE OR REPLACE FUNCTION queen.operator_timer_v1(p_tenant uuid, p_action text, p_timer_id text, p_body jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF NOT queen.uuid_ok_v1(p_timer_id) THEN
    PERFORM queen.fail_v1('timers_invalid_timer_id', 'The timer id is a UUID.', NULL);
  END IF;
  IF p_body IS NOT NULL AND jsonb_typeof(p_body) <> 'object' THEN
    PERFORM queen.fail_v1('timers_invalid_field', 'The body is a JSON object: deliverAt or delaySeconds.', NULL);
  END IF;
  IF coalesce(p_body, '{}'::jsonb) ?| ARRAY['op', 'timerId'] THEN
    PERFORM queen.fail_v1('timers_body_conflicts_with_path', 'The path names the operation and the timer; the body gives only when.', NULL);
  END IF;
  RETURN queen.timers_apply_v1(p_tenant, jsonb_build_array(
    CASE p_action WHEN 'cancel' THEN '{}'::jsonb ELSE coalesce(p_body, '{}'::jsonb) END
    || jsonb_build_object('op', p_action, 'timerId', p_timer_id))) -> 0;
END $function$
CREATE OR REPLACE FUNCTION queen.operator_timers_v1(p_tenant uuid, p_queue text, p_state text, p_late_seconds integer, p_after text, p_limit integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_limit INT := queen.operator_page_v1(p_limit, 100);
  v_state TEXT := coalesce(p_state, 'all');
  v_now TIMESTAMPTZ := clock_timestamp();
  v_late TIMESTAMPTZ;
  v_at TIMESTAMPTZ;
  v_id UUID;
  v_rows JSONB;
BEGIN
  IF p_queue IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_queue, 'timers_invalid_queue', 'A queue name');
  END IF;
  IF v_state NOT IN ('all', 'due', 'late', 'pending') THEN
    PERFORM queen.fail_v1('operator_invalid_state', 'state is all, due, late or pending.', NULL);
  END IF;
  IF p_late_seconds IS NOT NULL AND (p_late_seconds < 0 OR p_late_seconds > 86400) THEN
    PERFORM queen.fail_v1('operator_invalid_state', 'lateSeconds is a whole number from 0 to 86400.', NULL);
  END IF;
  v_late := v_now - make_interval(secs => coalesce(p_late_seconds, 60));
  SELECT c.at, c.id INTO v_at, v_id FROM queen.timers_cursor_v1(p_after) c;
  WITH page AS (
    SELECT t.* FROM queen.log_timers t
     WHERE t.tenant_id = p_tenant AND (p_queue IS NULL OR t.queue = p_queue)
       AND (t.deliver_at, t.timer_id) > (v_at, v_id)
       AND CASE v_state WHEN 'due' THEN t.deliver_at <= v_now WHEN 'late' THEN t.deliver_at <= v_late
                        WHEN 'pending' THEN t.deliver_at > v_now ELSE true END
     ORDER BY t.deliver_at, t.timer_id LIMIT v_limit
  )
  SELECT coalesce(jsonb_agg(jsonb_build_object(
           'timerId', t.timer_id, 'timerKey', t.timer_key, 'queue', t.queue, 'partition', t.partition,
           'deliverAt', queen.ts_v1(t.deliver_at), 'createdAt', queen.ts_v1(t.created_at),
           'bytes', pg_column_size(t.payload), 'due', t.deliver_at <= v_now, 'late', t.deliver_at <= v_late)
           ORDER BY t.deliver_at, t.timer_id), '[]'::jsonb)
    INTO v_rows FROM page t;
  RETURN jsonb_build_object('timers', v_rows, 'now', queen.ts_v1(v_now),
    'next', queen.operator_next_v1(v_rows, v_limit, to_jsonb((v_rows -> -1 ->> 'deliverAt') || ',' || (v_rows -> -1 ->> 'timerId'))));
END $function$
CREATE OR REPLACE FUNCTION queen.sweeper_gauges_v1()
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT jsonb_build_object(
    'timersDue', (SELECT count(*) FROM (SELECT 1 FROM queen.log_timers WHERE deliver_at <= now() LIMIT 1000000) d),
    'timersOldestLateSeconds', coalesce(extract(epoch FROM now() - (
        SELECT t.deliver_at FROM queen.log_timers t WHERE t.deliver_at <= now()
        ORDER BY t.deliver_at LIMIT 1))::double precision, 0),
    'kvExpiredNotPruned', (SELECT count(*) FROM (SELECT 1 FROM queen.kv WHERE expires_at IS NOT NULL AND expires_at < now() LIMIT 1000000) e),
    'kvExpiryLagSeconds', coalesce(extract(epoch FROM now() - (
        SELECT min(o.expires_at) FROM generate_series(0, 63) AS g(s),
          LATERAL (SELECT k.expires_at FROM queen.kv k WHERE k.shard = g.s::smallint AND k.expires_at IS NOT NULL
                   ORDER BY k.expires_at LIMIT 1) o
        WHERE o.expires_at < now()))::double precision, 0))
$function$
CREATE OR REPLACE FUNCTION queen.sweeper_pass_run_v1(p_since timestamp with time zone, p_worker text, p_shard_count integer, p_fire_limit integer, p_prune_limit integer, p_prune boolean, p_retain boolean, p_retention_default integer, p_links integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_since TIMESTAMPTZ := coalesce(p_since, now());
  v_shards SMALLINT[];
  v_claimed_at TIMESTAMPTZ;
  v_fire_on BOOLEAN := queen.timers_fire_enabled_v1();
  v_fire JSONB := '{"fired": 0, "duplicates": 0, "maxLateSeconds": 0}';
  v_fired INT;
  v_pruned INT := 0;
  v_prune_full BOOLEAN := false;
  v_fired_at TIMESTAMPTZ;
  v_next TIMESTAMPTZ;
  v_n INT;
  v_s SMALLINT;
  v_retain JSONB;
  v_removed INT := 0;
  v_unfinished INT := 0;
  v_removed_bytes BIGINT := 0;
  v_retain_full BOOLEAN := false;
  v_retain_queues JSONB := '[]';
  v_retained_at TIMESTAMPTZ;
  v_groups INT := 0;
  v_partitions INT := 0;
  v_settled INT := 0;
  v_answer JSONB;
BEGIN
  IF p_prune THEN
    SELECT array_agg(c.shard ORDER BY c.shard) INTO v_shards FROM (
      SELECT s.shard FROM queen.sweeper_shards s
      WHERE s.last_swept_at IS NULL OR s.last_swept_at < v_since
      ORDER BY s.last_swept_at NULLS FIRST, s.shard
      LIMIT p_shard_count
      FOR UPDATE SKIP LOCKED) c;
  END IF;
  v_claimed_at := clock_timestamp();
  IF v_fire_on AND p_retain THEN
    v_fire := queen.timers_fire_v3(p_fire_limit, p_links);
  ELSIF v_fire_on THEN
    v_fire := queen.timers_fire_v1(p_fire_limit);
  END IF;
  v_fired := (v_fire ->> 'fired')::int;
  v_fired_at := clock_timestamp();
  IF v_shards IS NOT NULL THEN
    FOREACH v_s IN ARRAY v_shards LOOP
      v_n := queen.kv_prune_v1(v_s, p_prune_limit);
      v_pruned := v_pruned + v_n;
      v_prune_full := v_prune_full OR v_n >= p_prune_limit;
    END LOOP;
    IF p_retain THEN
      v_retained_at := clock_timestamp();
      FOREACH v_s IN ARRAY v_shards LOOP
        v_retain := queen.log_retain_v1(v_s, p_prune_limit, p_retention_default);
        v_groups := v_groups + (v_retain ->> 'groups')::int;
        v_partitions := v_partitions + (v_retain ->> 'partitions')::int;
        v_removed := v_removed + (v_retain ->> 'removed')::int;
        v_unfinished := v_unfinished + (v_retain ->> 'unfinished')::int;
        v_removed_bytes := v_removed_bytes + (v_retain ->> 'bytes')::bigint;
        v_retain_full := v_retain_full OR (v_retain ->> 'full')::boolean;
        v_retain_queues := v_retain_queues || (v_retain -> 'queues');
      END LOOP;
      -- Last, so the queue rows' FOR SHARE it takes is held only to this pass's commit.
      FOREACH v_s IN ARRAY v_shards LOOP
        v_settled := v_settled + queen.log_settle_ready_v1(v_s);
      END LOOP;
    END IF;
    UPDATE queen.sweeper_shards SET last_swept_at = now(), swept_by = p_worker WHERE shard = ANY (v_shards);
  END IF;
  IF v_shards IS NULL AND NOT (v_fire_on AND v_fired >= p_fire_limit) THEN
    -- The end of the caller's cycle: when the cell's next future timer falls due (one probe of
    -- idx_log_timers_due).
    SELECT t.deliver_at INTO v_next FROM queen.log_timers t WHERE t.deliver_at > now()
      ORDER BY t.deliver_at LIMIT 1;
  END IF;
  -- A pass that fired, pruned and removed nothing wrote only its own bookkeeping: losing that
  -- commit in a crash loses nothing, so it does not wait for the WAL flush. At 1,000 timers a second
  -- the sweeper wakes every few tens of ms and most passes are empty; each waiting for an fsync was
  -- measured (bench:timers, 2026-11-29) to cost CPU and fire lag on a 2-core machine. A pass that
  -- fired keeps the synchronous commit: a message a consumer has seen must survive a crash.
  IF v_fired = 0 AND v_pruned = 0 AND v_removed = 0 THEN
    SET LOCAL synchronous_commit = off;
  END IF;
  -- pruneSeconds ends where the retention began (without retention, here).
  v_answer := jsonb_build_object(
    'since', v_since, 'shards', coalesce(to_jsonb(v_shards), '[]'::jsonb), 'fireEnabled', v_fire_on,
    'fired', v_fired, 'duplicates', (v_fire ->> 'duplicates')::int,
    'maxLateSeconds', (v_fire ->> 'maxLateSeconds')::double precision,
    'fireFull', v_fire_on AND v_fired >= p_fire_limit,
    'pruned', v_pruned, 'pruneFull', v_prune_full,
    'fireSeconds', extract(epoch FROM v_fired_at - v_claimed_at)::double precision,
    'pruneSeconds', extract(epoch FROM coalesce(v_retained_at, clock_timestamp()) - v_fired_at)::double precision,
    'claimedAtUs', (extract(epoch FROM v_claimed_at) * 1000000)::bigint,
    'finishedAtUs', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint,
    'nextDueInMs', (extract(epoch FROM v_next - clock_timestamp()) * 1000)::double precision);
  IF NOT p_retain THEN
    RETURN v_answer;
  END IF;
  RETURN v_answer || jsonb_build_object(
    'removed', v_removed, 'removedUnfinished', v_unfinished, 'removedBytes', v_removed_bytes,
    'retainFull', v_retain_full, 'retainQueues', v_retain_queues,
    'removedGroups', v_groups, 'removedPartitions', v_partitions, 'settledPartitions', v_settled,
    'retainSeconds', coalesce(extract(epoch FROM clock_timestamp() - v_retained_at)::double precision, 0))
    || jsonb_strip_nulls(jsonb_build_object('traced', v_fire -> 'traced', 'links', v_fire -> 'links'));
END $function$
CREATE OR REPLACE FUNCTION queen.sweeper_pass_v1(p_since timestamp with time zone, p_worker text, p_shard_count integer, p_fire_limit integer, p_prune_limit integer, p_prune boolean)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT queen.sweeper_pass_run_v1(p_since, p_worker, p_shard_count, p_fire_limit, p_prune_limit, p_prune, false, 0, 0) $function$
CREATE OR REPLACE FUNCTION queen.sweeper_pass_v4(p_since timestamp with time zone, p_worker text, p_shard_count integer, p_fire_limit integer, p_prune_limit integer, p_prune boolean, p_retention_default integer, p_links integer)
 RETURNS jsonb
 LANGUAGE sql
AS $function$
  SELECT queen.sweeper_pass_run_v1(p_since, p_worker, p_shard_count, p_fire_limit, p_prune_limit, p_prune,
    true, p_retention_default, p_links)
$function$
CREATE OR REPLACE FUNCTION queen.sweeper_report_v1(p_worker text, p_state jsonb, p_sample_seconds integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_samples JSONB;
  v_at TIMESTAMPTZ;
  v_sample JSONB;
BEGIN
  SET LOCAL synchronous_commit = off;
  IF p_worker IS NULL OR length(p_worker) > 512 THEN
    PERFORM queen.fail_v1('bad_request', 'A sweeper id is 1 to 512 characters.', NULL);
  END IF;
  IF p_state IS NULL THEN
    DELETE FROM queen.system_state WHERE key = 'sweeper:' || p_worker;
    RETURN jsonb_build_object('sampled', false);
  END IF;
  INSERT INTO queen.system_state (key, value, updated_at) VALUES ('sweeper:' || p_worker, p_state, now())
  ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;
  DELETE FROM queen.system_state WHERE key LIKE 'sweeper:%' AND updated_at < now() - interval '1 hour';

  INSERT INTO queen.system_state (key, value, updated_at) VALUES ('log_throughput', '[]', '-infinity')
  ON CONFLICT (key) DO NOTHING;
  SELECT s.value, s.updated_at INTO v_samples, v_at FROM queen.system_state s
   WHERE s.key = 'log_throughput' FOR UPDATE SKIP LOCKED;
  IF NOT FOUND OR v_at > now() - make_interval(secs => greatest(1, p_sample_seconds)) THEN
    RETURN jsonb_build_object('sampled', false);
  END IF;
  v_sample := jsonb_build_object('atMs', (extract(epoch FROM now()) * 1000)::bigint) || queen.log_totals_v1();
  SELECT coalesce(jsonb_agg(e ORDER BY (e ->> 'atMs')::bigint), '[]'::jsonb) INTO v_samples FROM (
    SELECT e FROM jsonb_array_elements(CASE WHEN jsonb_typeof(v_samples) = 'array' THEN v_samples ELSE '[]' END) e
     WHERE (e ->> 'atMs')::bigint >= (extract(epoch FROM now() - interval '10 minutes') * 1000)::bigint
     ORDER BY (e ->> 'atMs')::bigint DESC LIMIT 119) kept;
  UPDATE queen.system_state SET value = v_samples || v_sample, updated_at = now() WHERE key = 'log_throughput';
  RETURN jsonb_build_object('sampled', true);
END $function$
CREATE OR REPLACE FUNCTION queen.tenant_gate_v1(p_tenant uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  RETURN NULL;
END $function$
CREATE OR REPLACE FUNCTION queen.tenant_moving_v1(p_tenant uuid)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QK400', MESSAGE = 'tenant_moving',
    DETAIL = jsonb_build_object('code', 'tenant_moving', 'role', (SELECT m.role FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant))::text;
END $function$
CREATE OR REPLACE FUNCTION queen.timers_apply_v1(p_tenant uuid, p_ops jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_now TIMESTAMPTZ := now();
  v_n INT;
  v_when TIMESTAMPTZ[];
  v_results JSONB[];
  v_op JSONB;
  v_i INT;
  v_id UUID;
  v_row queen.log_timers;
  v_key TEXT;
  v_ords INT[];
  v_ids UUID[];
  v_k INT;
  v_existing INT := 0;
  v_keyed INT := 0;
  v_horizon BIGINT;
BEGIN
  -- The shortcut for one plainly valid schedule without a timerKey and with delaySeconds (the
  -- route's common call): plpgsql's cost per call is mostly setting up each expression and function
  -- it touches, and the general path below touches a dozen. The guard only admits what every rule
  -- of timers_check_op_v1 and timers_when_v1 accepts, and the row and answer are the ones the
  -- general path makes; anything else (every refusal included) takes the general path.
  -- test/timers/fastPath.test.ts holds both paths to the same answers (SET queen.timers_fast_path = off).
  IF jsonb_typeof(p_ops) = 'array' AND current_setting('queen.timers_fast_path', true) IS DISTINCT FROM 'off' THEN
    v_op := p_ops -> 0;
    v_horizon := queen.limit_v1('timers_max_horizon_seconds');
    -- AND stops at a false but not at a NULL, so no term below may raise on what an earlier one let through.
    IF jsonb_array_length(p_ops) = 1 AND jsonb_typeof(v_op) = 'object'
       AND v_op -> 'op' = '"schedule"'::jsonb
       AND (v_op - '{op,queue,partition,payload,delaySeconds,timerKey}'::text[]) = '{}'::jsonb
       AND jsonb_typeof(v_op -> 'queue') = 'string' AND queen.name_ok_v1(v_op ->> 'queue')
       AND (NOT v_op ? 'partition' OR v_op -> 'partition' = 'null'::jsonb
            OR (jsonb_typeof(v_op -> 'partition') = 'string' AND queen.name_ok_v1(v_op ->> 'partition')))
       AND v_op ? 'payload'
       AND octet_length((v_op -> 'payload')::text) <= queen.limit_v1('timers_max_payload_bytes')
       AND (NOT v_op ? 'timerKey' OR v_op -> 'timerKey' = 'null'::jsonb)
       AND NOT v_op ? 'deliverAt'
       AND jsonb_typeof(v_op -> 'delaySeconds') = 'number'
       AND (v_op ->> 'delaySeconds')::numeric BETWEEN 0 AND v_horizon
       AND queen.limit_v1('kv_max_batch') >= 1 THEN
      -- Rounded to microseconds before the double cast, as in timers_when_v1 (1e-400 underflows it).
      v_when := ARRAY[date_trunc('milliseconds', v_now + make_interval(secs => round((v_op ->> 'delaySeconds')::numeric, 6)::double precision))];
      INSERT INTO queen.log_timers (tenant_id, queue, partition, payload, deliver_at, created_at)
      VALUES (p_tenant, v_op ->> 'queue',
              coalesce(CASE WHEN jsonb_typeof(v_op -> 'partition') = 'string' THEN v_op ->> 'partition' END, 'Default'),
              v_op -> 'payload', v_when[1], v_now)
      RETURNING timer_id INTO v_id;
      RETURN jsonb_build_array(jsonb_build_object('index', 0, 'op', 'schedule', 'timerId', v_id,
        'deliverAt', queen.ts_v1(v_when[1]), 'created', true));
    END IF;
  END IF;
  v_n := queen.array_length_v1(p_ops, 'timers_operations_required', 'timers must be a non-empty array of operations.', NULL,
    queen.limit_v1('kv_max_batch'), 'timers_batch_too_large', 'At most %2$s timer operations in one request.');
  v_when := array_fill(NULL::timestamptz, ARRAY[v_n]);
  v_results := array_fill(NULL::jsonb, ARRAY[v_n]);
  FOR v_i IN 0 .. v_n - 1 LOOP
    v_when[v_i + 1] := queen.timers_check_op_v1(p_ops -> v_i, v_i, v_now);
    IF p_ops -> v_i ->> 'op' <> 'schedule' THEN
      v_existing := v_existing + 1;
    ELSIF jsonb_typeof(p_ops -> v_i -> 'timerKey') = 'string' THEN
      v_keyed := v_keyed + 1;
    END IF;
  END LOOP;

  -- Existing timers, in lock order.
  IF v_existing > 0 THEN
    FOR v_op, v_i, v_id IN
      SELECT o.op, (o.ord - 1)::int, (o.op ->> 'timerId')::uuid
      FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS o(op, ord)
      WHERE o.op ->> 'op' IN ('cancel', 'reschedule')
      ORDER BY (o.op ->> 'timerId')::uuid, o.ord
    LOOP
      IF v_op ->> 'op' = 'cancel' THEN
        DELETE FROM queen.log_timers WHERE timer_id = v_id AND tenant_id = p_tenant;
        v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'cancel', 'timerId', v_id)
          || CASE WHEN FOUND THEN '{"cancelled": true}'::jsonb ELSE '{"cancelled": false, "reason": "absent"}'::jsonb END;
      ELSE
        UPDATE queen.log_timers SET deliver_at = v_when[v_i + 1]
        WHERE timer_id = v_id AND tenant_id = p_tenant;
        v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'reschedule', 'timerId', v_id)
          || CASE WHEN FOUND THEN jsonb_build_object('rescheduled', true, 'deliverAt', queen.ts_v1(v_when[v_i + 1]))
                  ELSE '{"rescheduled": false, "reason": "absent"}'::jsonb END;
      END IF;
    END LOOP;
  END IF;

  -- New timers without a key: one set-based insert (ids drawn first, so each answer finds its row).
  -- Measured (bench:timers, 2026-11-29): a row-at-a-time insert loop held batches of 100 to half
  -- of pg-boss's insert rate.
  IF v_existing + v_keyed < v_n THEN
    SELECT array_agg(o.ord::int ORDER BY o.ord), array_agg(gen_random_uuid() ORDER BY o.ord)
      INTO v_ords, v_ids
    FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS o(op, ord)
    WHERE o.op ->> 'op' = 'schedule' AND jsonb_typeof(o.op -> 'timerKey') IS DISTINCT FROM 'string';
  END IF;
  IF v_ords IS NOT NULL THEN
    INSERT INTO queen.log_timers (timer_id, tenant_id, queue, partition, payload, deliver_at, created_at)
    SELECT v_ids[k], p_tenant, op ->> 'queue',
           coalesce(CASE WHEN jsonb_typeof(op -> 'partition') = 'string' THEN op ->> 'partition' END, 'Default'),
           op -> 'payload', v_when[v_ords[k]], v_now
    FROM generate_subscripts(v_ords, 1) AS k, LATERAL (SELECT p_ops -> (v_ords[k] - 1) AS op) x;
    FOR v_k IN 1 .. cardinality(v_ords) LOOP
      v_results[v_ords[v_k]] := jsonb_build_object('index', v_ords[v_k] - 1, 'op', 'schedule', 'timerId', v_ids[v_k],
        'deliverAt', queen.ts_v1(v_when[v_ords[v_k]]), 'created', true);
    END LOOP;
  END IF;

  -- Keyed schedules, in key order so two bundles sharing keys take them in one order.
  IF v_keyed > 0 THEN
    FOR v_op, v_i IN
      SELECT o.op, (o.ord - 1)::int
      FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS o(op, ord)
      WHERE o.op ->> 'op' = 'schedule' AND jsonb_typeof(o.op -> 'timerKey') = 'string'
      ORDER BY (o.op ->> 'timerKey') COLLATE "C", o.ord
    LOOP
      v_key := v_op ->> 'timerKey';
      INSERT INTO queen.log_timers (tenant_id, timer_key, queue, partition, payload, deliver_at, created_at)
      VALUES (p_tenant, v_key, v_op ->> 'queue',
              coalesce(CASE WHEN jsonb_typeof(v_op -> 'partition') = 'string' THEN v_op ->> 'partition' END, 'Default'),
              v_op -> 'payload', v_when[v_i + 1], v_now)
      ON CONFLICT (tenant_id, timer_key) WHERE timer_key IS NOT NULL DO NOTHING
      RETURNING * INTO v_row;
      IF FOUND THEN
        v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'schedule', 'timerId', v_row.timer_id,
          'deliverAt', queen.ts_v1(v_row.deliver_at), 'created', true);
      ELSE
        -- The key is taken: a new statement sees the winner, committed (READ COMMITTED).
        SELECT * INTO v_row FROM queen.log_timers WHERE tenant_id = p_tenant AND timer_key = v_key;
        IF NOT FOUND THEN
          -- Fired or cancelled between the conflict and this read: the key is free again, take it.
          INSERT INTO queen.log_timers (tenant_id, timer_key, queue, partition, payload, deliver_at, created_at)
          VALUES (p_tenant, v_key, v_op ->> 'queue',
                  coalesce(CASE WHEN jsonb_typeof(v_op -> 'partition') = 'string' THEN v_op ->> 'partition' END, 'Default'),
                  v_op -> 'payload', v_when[v_i + 1], v_now)
          RETURNING * INTO v_row;
          v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'schedule', 'timerId', v_row.timer_id,
            'deliverAt', queen.ts_v1(v_row.deliver_at), 'created', true);
        ELSE
          v_results[v_i + 1] := jsonb_build_object('index', v_i, 'op', 'schedule', 'timerId', v_row.timer_id,
            'deliverAt', queen.ts_v1(v_row.deliver_at), 'created', false);
        END IF;
      END IF;
    END LOOP;
  END IF;

  IF array_position(v_results, NULL) IS NOT NULL THEN
    RAISE EXCEPTION 'timers_apply_v1 left operation % unanswered', array_position(v_results, NULL) - 1;
  END IF;
  RETURN to_jsonb(v_results);
END $function$
CREATE OR REPLACE FUNCTION queen.timers_apply_v2(p_tenant uuid, p_ops jsonb, p_sealed jsonb DEFAULT NULL::jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_encrypted TEXT[];
  v_ops JSONB;
  v_out JSONB;
  v_ceiling TEXT;
  v_now TIMESTAMPTZ := now();
  v_i INT;
BEGIN
  PERFORM queen.tenant_moving_v1(m.tenant_id) FROM queen.tenant_moves m WHERE m.tenant_id = p_tenant;
  IF jsonb_typeof(p_ops) = 'array' THEN
    SELECT array_agg(q.name ORDER BY q.name) INTO v_encrypted
      FROM queen.queues q JOIN queen.queue_options o ON o.queue_id = q.id
     WHERE q.tenant_id = p_tenant AND o.encryption_enabled
       AND q.name = ANY (ARRAY(SELECT DISTINCT e ->> 'queue' FROM jsonb_array_elements(p_ops) e WHERE queen.timers_sealable_v1(e)));
  END IF;
  IF v_encrypted IS NULL THEN
    v_out := queen.timers_apply_v1(p_tenant, p_ops);
    PERFORM queen.timers_unseal_cancelled_v1(p_ops, v_out);
    RETURN v_out;
  END IF;
  -- v1's checks, in its order, on the request as given: a bad request is refused before any seal.
  PERFORM queen.array_length_v1(p_ops, 'timers_operations_required', 'timers must be a non-empty array of operations.', NULL,
    queen.limit_v1('kv_max_batch'), 'timers_batch_too_large', 'At most %2$s timer operations in one request.');
  FOR v_i IN 0 .. jsonb_array_length(p_ops) - 1 LOOP
    PERFORM queen.timers_check_op_v1(p_ops -> v_i, v_i, v_now);
  END LOOP;
  IF EXISTS (SELECT 1 FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS t (e, k)
              WHERE queen.timers_sealable_v1(e) AND e ->> 'queue' = ANY (v_encrypted)
                AND jsonb_typeof(p_sealed -> (k::int - 1)) IS DISTINCT FROM 'string') THEN
    RAISE EXCEPTION USING ERRCODE = 'QK428', MESSAGE = 'sealing_required', DETAIL = jsonb_build_object('queues', v_encrypted)::text;
  END IF;
  SELECT jsonb_agg(CASE WHEN queen.timers_sealable_v1(e) AND e ->> 'queue' = ANY (v_encrypted)
                        THEN e || jsonb_build_object('payload', p_sealed -> (k::int - 1)) ELSE e END ORDER BY k)
    INTO v_ops FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS t (e, k);
  -- The payload ceiling was held to the plaintext above; the sealed text is longer (base64 and its
  -- header), so v1's own check of it is lifted for this call alone (a transaction-local setting,
  -- put back after; undone with the transaction or the subtransaction if v1 raises).
  v_ceiling := coalesce(current_setting('queen.timers_max_payload_bytes', true), '');
  PERFORM set_config('queen.timers_max_payload_bytes', '9223372036854775807', true);
  v_out := queen.timers_apply_v1(p_tenant, v_ops);
  PERFORM set_config('queen.timers_max_payload_bytes', v_ceiling, true);
  INSERT INTO queen.sealed_timers (timer_id)
  SELECT (v_out -> (k::int - 1) ->> 'timerId')::uuid FROM jsonb_array_elements(p_ops) WITH ORDINALITY AS t (e, k)
   WHERE queen.timers_sealable_v1(e) AND e ->> 'queue' = ANY (v_encrypted)
     AND v_out -> (k::int - 1) -> 'created' = 'true'::jsonb
  ON CONFLICT DO NOTHING;
  PERFORM queen.timers_unseal_cancelled_v1(p_ops, v_out);
  RETURN v_out;
END $function$
CREATE OR REPLACE FUNCTION queen.timers_check_op_v1(p_op jsonb, p_index integer, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_max_payload BIGINT := queen.limit_v1('timers_max_payload_bytes');
  v_kind TEXT;
  v_fields TEXT[];
BEGIN
  IF jsonb_typeof(p_op) IS DISTINCT FROM 'object' THEN
    PERFORM queen.fail_v1('timers_unknown_op', format('Operation %s must be an object with op.', p_index), p_index);
  END IF;
  v_kind := CASE WHEN jsonb_typeof(p_op -> 'op') = 'string' THEN p_op ->> 'op' END;
  IF v_kind IS NULL OR v_kind NOT IN ('schedule', 'cancel', 'reschedule') THEN
    PERFORM queen.fail_v1('timers_unknown_op',
      format('Operation %s: op must be one of schedule, cancel, reschedule.', p_index), p_index);
  END IF;
  -- A field the operation does not take is refused, never ignored: a misspelled timerKey ignored
  -- makes every retry of a schedule a new timer, each delivered (docs/timers.md gives the fields).
  v_fields := CASE v_kind WHEN 'schedule' THEN '{op,queue,partition,payload,deliverAt,delaySeconds,timerKey}'
                          WHEN 'cancel' THEN '{op,timerId}' ELSE '{op,timerId,deliverAt,delaySeconds}' END;
  IF (p_op - v_fields) <> '{}'::jsonb THEN
    PERFORM queen.fail_v1('timers_invalid_field', format('Operation %s (%s) has a field %s does not take: %s. Its fields are %s.',
      p_index, v_kind, v_kind, (SELECT string_agg(left(f, 64), ', ' ORDER BY f) FROM jsonb_object_keys(p_op - v_fields) f),
      array_to_string(v_fields, ', ')), p_index);
  END IF;
  IF v_kind = 'cancel' THEN
    PERFORM queen.timers_uuid_v1(p_op -> 'timerId', p_index);
    RETURN NULL;
  END IF;
  IF v_kind = 'reschedule' THEN
    PERFORM queen.timers_uuid_v1(p_op -> 'timerId', p_index);
    RETURN queen.timers_when_v1(p_op, p_index, p_now);
  END IF;
  -- The log's own name rule (queen.log_name_ok_v1), checked now: a name the log would refuse at
  -- fire time would be a promise that can never be kept.
  IF jsonb_typeof(p_op -> 'queue') IS DISTINCT FROM 'string' THEN
    PERFORM queen.fail_v1('timers_queue_required',
      format('Operation %s: queue is required (the queue the message is delivered to).', p_index), p_index);
  END IF;
  IF NOT queen.log_name_ok_v1(p_op ->> 'queue') THEN
    PERFORM queen.fail_v1('timers_invalid_queue', format(
      'Operation %s: a queue name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', p_index), p_index);
  END IF;
  IF p_op ? 'partition' AND p_op -> 'partition' <> 'null'::jsonb
     AND (jsonb_typeof(p_op -> 'partition') IS DISTINCT FROM 'string' OR NOT queen.log_name_ok_v1(p_op ->> 'partition')) THEN
    PERFORM queen.fail_v1('timers_invalid_partition', format(
      'Operation %s: a partition name is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.', p_index), p_index);
  END IF;
  IF NOT p_op ? 'payload' THEN
    PERFORM queen.fail_v1('timers_payload_required',
      format('Operation %s: payload is required (it becomes the message).', p_index), p_index);
  END IF;
  IF octet_length((p_op -> 'payload')::text) > v_max_payload THEN
    PERFORM queen.fail_v1('timers_payload_too_large',
      format('Operation %s: the payload is larger than %s bytes (QUEEN_TIMERS_MAX_PAYLOAD_BYTES).', p_index, v_max_payload), p_index);
  END IF;
  IF p_op ? 'timerKey' AND p_op -> 'timerKey' <> 'null'::jsonb
     AND (jsonb_typeof(p_op -> 'timerKey') IS DISTINCT FROM 'string' OR length(p_op ->> 'timerKey') NOT BETWEEN 1 AND 512) THEN
    PERFORM queen.fail_v1('timers_invalid_timer_key',
      format('Operation %s: timerKey must be a string of 1 to 512 characters.', p_index), p_index);
  END IF;
  RETURN queen.timers_when_v1(p_op, p_index, p_now);
END $function$
CREATE OR REPLACE FUNCTION queen.timers_cursor_v1(p_after text, OUT at timestamp with time zone, OUT id uuid)
 RETURNS record
 LANGUAGE plpgsql
 STABLE
AS $function$
BEGIN
  at := '-infinity';
  id := '00000000-0000-0000-0000-000000000000';
  IF p_after IS NOT NULL THEN
    IF p_after !~* ('^\d{4}-\d{2}-\d{2}T[0-9:.]+Z,' || queen.uuid_pattern_v1() || '$') THEN
      PERFORM queen.fail_v1('timers_invalid_cursor', 'after must be the next value of a previous page.', NULL);
    END IF;
    BEGIN
      at := split_part(p_after, ',', 1)::timestamptz;
      id := split_part(p_after, ',', 2)::uuid;
    EXCEPTION WHEN OTHERS THEN
      PERFORM queen.fail_v1('timers_invalid_cursor', 'after must be the next value of a previous page.', NULL);
    END;
  END IF;
END $function$
CREATE OR REPLACE FUNCTION queen.timers_fire_batch_v1(p_limit integer, p_marks boolean, OUT claimed queen.log_timers[], OUT answer jsonb)
 RETURNS record
 LANGUAGE plpgsql
 SET enable_bitmapscan TO 'off'
AS $function$
DECLARE
  r RECORD;
  v_ids RECORD;
  v_tenants UUID[] := '{}';
  v_queues TEXT[] := '{}';
  v_parts TEXT[] := '{}';
  v_pids UUID[] := '{}';
  v_lasts BIGINT[] := '{}';
  v_fired INT;
  v_stored INT;
BEGIN
  SELECT array_agg(c.t ORDER BY (c.t).deliver_at, (c.t).timer_id) INTO claimed FROM (
    SELECT t FROM queen.log_timers t
    WHERE t.deliver_at <= now()
    ORDER BY t.deliver_at, t.timer_id
    LIMIT p_limit
    FOR UPDATE SKIP LOCKED) c;
  IF claimed IS NULL THEN
    answer := jsonb_build_object('fired', 0, 'duplicates', 0, 'maxLateSeconds', 0);
    RETURN;
  END IF;
  v_fired := cardinality(claimed);
  -- The lock order: timers (held above), then partitions in ascending (tenant, queue, partition)
  -- order, each created on first use and locked once, as queen.log_lock_partitions_v1 does for one
  -- tenant, so a pass and a transaction-wire bundle pushing to the same partitions can never wait on
  -- each other in a circle, nor two sweepers. Each timer fires into its own tenant's queue.
  -- Each partition's timers, in claim order ((deliverAt, timerId), the order it numbers them in),
  -- through the one append (queen.log_append_v1); a timer's transactionId is 'timer:<id>', so a fire
  -- that already happened (the message stored before) stores nothing twice. With p_marks the
  -- schedule's trace context goes with the message (NULL for a timer scheduled without); 0.1.0's
  -- fire stores none.
  FOR r IN
    SELECT c.tenant_id, c.queue COLLATE "C" AS queue, c.partition COLLATE "C" AS partition,
           array_agg(c.payload ORDER BY c.deliver_at, c.timer_id) AS payloads,
           array_agg('timer:' || c.timer_id::text ORDER BY c.deliver_at, c.timer_id) AS txids,
           array_agg(CASE WHEN p_marks THEN c.trace_id END ORDER BY c.deliver_at, c.timer_id) AS trace_ids,
           array_agg(CASE WHEN p_marks THEN c.span_id END ORDER BY c.deliver_at, c.timer_id) AS span_ids
    FROM unnest(claimed) AS c GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
  LOOP
    -- The log's own name rules, once per partition (a schedule checked them already).
    PERFORM queen.log_check_push_v1(r.queue, r.partition, NULL, NULL);
    -- Found and locked as a push does: a partition removed (its queue deleted, or emptied and
    -- removed by retention) between the look-up and the lock is created anew.
    v_ids := queen.log_lock_partition_v1(r.tenant_id, r.queue, r.partition);
    v_tenants := v_tenants || r.tenant_id;
    v_queues := v_queues || r.queue;
    v_parts := v_parts || r.partition;
    v_pids := v_pids || v_ids.p_id;
    v_lasts := v_lasts || v_ids.last_seq;
    PERFORM queen.log_append_v1(false, r.tenant_id, r.queue, r.partition, r.payloads, r.txids, r.trace_ids, r.span_ids);
  END LOOP;
  -- What was stored: each partition's last_seq moved past the one read under its lock by exactly
  -- the messages stored (the rest were duplicates).
  SELECT sum(p.last_seq - k.last_seq)::int INTO v_stored
    FROM unnest(v_pids, v_lasts) AS k(pid, last_seq) JOIN queen.partitions p ON p.id = k.pid;
  IF p_marks THEN
    -- The batch's sealed timers leave queen.sealed_timers with them (no foreign key: 054 says why),
    -- and a message stored from one holds the same sealed text: marked so the pop opens it. A
    -- duplicate (its message stored before, at or below the last_seq read under the lock) marks
    -- nothing again. Each message found by its (partition, transactionId) key.
    WITH unsealed AS (
      DELETE FROM queen.sealed_timers s USING unnest(claimed) AS t WHERE s.timer_id = t.timer_id
      RETURNING s.timer_id
    ), stored AS (
      SELECT k.pid, k.last_seq, (SELECT m.seq FROM queen.messages m
                                  WHERE m.partition_id = k.pid AND m.transaction_id = 'timer:' || u.timer_id::text OFFSET 0) AS seq
      FROM unsealed u
      JOIN unnest(claimed) AS t ON t.timer_id = u.timer_id
      JOIN unnest(v_tenants, v_queues, v_parts, v_pids, v_lasts) AS k(tenant_id, queue, partition, pid, last_seq)
        ON k.tenant_id = t.tenant_id AND k.queue = t.queue AND k.partition = t.partition
    )
    INSERT INTO queen.sealed_messages (partition_id, seq)
    SELECT s.pid, s.seq FROM stored s WHERE s.seq > s.last_seq;
  END IF;
  DELETE FROM queen.log_timers WHERE timer_id = ANY (ARRAY(SELECT c.timer_id FROM unnest(claimed) AS c));
  answer := jsonb_build_object('fired', v_fired, 'duplicates', v_fired - v_stored,
    'maxLateSeconds', extract(epoch FROM clock_timestamp() - claimed[1].deliver_at)::double precision);
END $function$
CREATE OR REPLACE FUNCTION queen.timers_fire_enabled_v1()
 RETURNS boolean
 LANGUAGE sql
 STABLE
AS $function$
  SELECT NOT EXISTS (
    SELECT 1 FROM queen.system_state
    WHERE key = 'timers_fire_enabled'
      AND (value = 'false'::jsonb OR value = '"false"'::jsonb OR value -> 'enabled' = 'false'::jsonb))
$function$
CREATE OR REPLACE FUNCTION queen.timers_fire_v1(p_limit integer)
 RETURNS jsonb
 LANGUAGE sql
AS $function$ SELECT b.answer FROM queen.timers_fire_batch_v1(p_limit, false) b $function$
CREATE OR REPLACE FUNCTION queen.timers_fire_v3(p_limit integer, p_links integer)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
DECLARE
  v_claimed queen.log_timers[];
  v_answer JSONB;
  v_traced INT;
  v_links JSONB := '[]';
BEGIN
  SELECT b.claimed, b.answer INTO v_claimed, v_answer FROM queen.timers_fire_batch_v1(p_limit, true) b;
  IF v_claimed IS NULL OR p_links <= 0 THEN
    RETURN v_answer;
  END IF;
  SELECT count(*)::int INTO v_traced FROM unnest(v_claimed) AS c WHERE c.trace_id IS NOT NULL AND c.span_id IS NOT NULL;
  IF v_traced > 0 THEN
    SELECT coalesce(jsonb_agg(jsonb_build_object('traceId', replace(l.trace_id::text, '-', ''), 'spanId', encode(l.span_id, 'hex'))), '[]')
      INTO v_links
      FROM (SELECT DISTINCT c.trace_id, c.span_id FROM unnest(v_claimed) AS c
            WHERE c.trace_id IS NOT NULL AND c.span_id IS NOT NULL LIMIT p_links) l;
  END IF;
  RETURN v_answer || jsonb_build_object('traced', v_traced, 'links', v_links);
END $function$
CREATE OR REPLACE FUNCTION queen.timers_list_v1(p_tenant uuid, p_queue text, p_after text, p_limit integer)
 RETURNS jsonb
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_at TIMESTAMPTZ;
  v_id UUID;
  v_limit INT := coalesce(p_limit, 100);
  v_rows JSONB;
  v_last queen.log_timers;
  v_count INT;
BEGIN
  IF v_limit NOT BETWEEN 1 AND 1000 THEN
    PERFORM queen.fail_v1('timers_invalid_limit', 'limit must be a whole number from 1 to 1000.', NULL);
  END IF;
  -- A filter no timer can match (a name a schedule would refuse) is a mistake to say, not an empty
  -- page to hand back silently: the pop route refuses such names too. (The route refuses U+0000.)
  IF p_queue IS NOT NULL THEN
    PERFORM queen.check_name_v1(p_queue, 'timers_invalid_queue', 'A queue name');
  END IF;
  SELECT c.at, c.id INTO v_at, v_id FROM queen.timers_cursor_v1(p_after) c;
  WITH page AS (
    SELECT t FROM queen.log_timers t
    WHERE t.tenant_id = p_tenant AND (p_queue IS NULL OR t.queue = p_queue)
      AND (t.deliver_at, t.timer_id) > (v_at, v_id)
    ORDER BY t.deliver_at, t.timer_id
    LIMIT v_limit
  )
  SELECT coalesce(jsonb_agg(queen.timers_row_json_v1(t) ORDER BY (t).deliver_at, (t).timer_id), '[]'::jsonb), count(*)
    INTO v_rows, v_count FROM page;
  IF v_count = v_limit THEN
    RETURN jsonb_build_object('timers', v_rows,
      'next', (v_rows -> -1 ->> 'deliverAt') || ',' || (v_rows -> -1 ->> 'timerId'));
  END IF;
  RETURN jsonb_build_object('timers', v_rows, 'next', NULL);
END $function$
CREATE OR REPLACE FUNCTION queen.timers_list_v2(p_tenant uuid, p_queue text, p_after text, p_limit integer)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT coalesce(queen.tenant_gate_v1(p_tenant),
                  jsonb_set(l.r, '{timers}', (SELECT coalesce(jsonb_agg(queen.timers_mark_sealed_v1(e) ORDER BY k), '[]'::jsonb)
                                                FROM jsonb_array_elements(l.r -> 'timers') WITH ORDINALITY AS t (e, k))))
    FROM (SELECT queen.timers_list_v1(p_tenant, p_queue, p_after, p_limit) AS r OFFSET 0) l
$function$
CREATE OR REPLACE FUNCTION queen.timers_mark_sealed_v1(p_timer jsonb)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT CASE WHEN EXISTS (SELECT 1 FROM queen.sealed_timers s WHERE s.timer_id = (p_timer ->> 'timerId')::uuid)
              THEN p_timer || '{"sealed": true}'::jsonb ELSE p_timer END
$function$
CREATE OR REPLACE FUNCTION queen.timers_peek_v1(p_tenant uuid, p_timer_id uuid)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT coalesce(
    (SELECT jsonb_build_object('found', true, 'timer', queen.timers_row_json_v1(t))
       FROM queen.log_timers t WHERE t.timer_id = p_timer_id AND t.tenant_id = p_tenant),
    '{"found": false}'::jsonb)
$function$
CREATE OR REPLACE FUNCTION queen.timers_peek_v2(p_tenant uuid, p_timer_id uuid)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT coalesce(queen.tenant_gate_v1(p_tenant),
                  CASE WHEN p.r ? 'timer' THEN jsonb_set(p.r, '{timer}', queen.timers_mark_sealed_v1(p.r -> 'timer')) ELSE p.r END)
    FROM (SELECT queen.timers_peek_v1(p_tenant, p_timer_id) AS r) p
$function$
CREATE OR REPLACE FUNCTION queen.timers_row_json_v1(r queen.log_timers)
 RETURNS jsonb
 LANGUAGE sql
 STABLE
AS $function$
  SELECT jsonb_build_object(
    'timerId', r.timer_id, 'queue', r.queue, 'partition', r.partition,
    'deliverAt', queen.ts_v1(r.deliver_at), 'payload', r.payload,
    'createdAt', queen.ts_v1(r.created_at))
    || CASE WHEN r.timer_key IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('timerKey', r.timer_key) END
$function$
CREATE OR REPLACE FUNCTION queen.timers_seal_texts_v1(p_ops jsonb, p_queues text[])
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT coalesce(array_agg(CASE WHEN queen.timers_sealable_v1(e) AND e ->> 'queue' = ANY (p_queues)
                                 THEN (e -> 'payload')::text END ORDER BY k), '{}')
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_ops) = 'array' THEN p_ops ELSE '[]' END) WITH ORDINALITY AS t (e, k)
$function$
CREATE OR REPLACE FUNCTION queen.timers_sealable_v1(p_op jsonb)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE
AS $function$
  SELECT jsonb_typeof(p_op) = 'object' AND p_op -> 'op' = '"schedule"'::jsonb
     AND jsonb_typeof(p_op -> 'queue') = 'string' AND p_op ? 'payload'
$function$
CREATE OR REPLACE FUNCTION queen.timers_stamp_traces_v1(p_results jsonb, p_trace jsonb)
 RETURNS jsonb
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF p_trace IS NOT NULL AND jsonb_typeof(p_trace) = 'object' AND jsonb_typeof(p_results) = 'array' THEN
    UPDATE queen.log_timers t SET trace_id = (p_trace ->> 'traceId')::uuid, span_id = decode(p_trace ->> 'spanId', 'hex')
      FROM jsonb_array_elements(p_results) e
     WHERE e -> 'created' = 'true'::jsonb AND t.timer_id = (e ->> 'timerId')::uuid;
  END IF;
  RETURN p_results;
END $function$
CREATE OR REPLACE FUNCTION queen.timers_unseal_cancelled_v1(p_ops jsonb, p_results jsonb)
 RETURNS void
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF jsonb_typeof(p_ops) = 'array' AND jsonb_path_exists(p_ops, '$[*] ? (@.op == "cancel")') THEN
    DELETE FROM queen.sealed_timers s
     WHERE s.timer_id IN (SELECT (r ->> 'timerId')::uuid FROM jsonb_array_elements(p_results) r
                           WHERE r -> 'cancelled' = 'true'::jsonb);
  END IF;
END $function$
CREATE OR REPLACE FUNCTION queen.timers_uuid_v1(p_value jsonb, p_index integer)
 RETURNS uuid
 LANGUAGE plpgsql
 IMMUTABLE
AS $function$
BEGIN
  IF jsonb_typeof(p_value) IS DISTINCT FROM 'string' OR NOT queen.uuid_ok_v1(p_value #>> '{}') THEN
    PERFORM queen.fail_v1('timers_invalid_timer_id',
      format('Operation %s: timerId must be a timer id (a UUID).', p_index), p_index);
  END IF;
  RETURN (p_value #>> '{}')::uuid;
END $function$
CREATE OR REPLACE FUNCTION queen.timers_when_v1(p_op jsonb, p_index integer, p_now timestamp with time zone)
 RETURNS timestamp with time zone
 LANGUAGE plpgsql
 STABLE
AS $function$
DECLARE
  v_horizon BIGINT := queen.limit_v1('timers_max_horizon_seconds');
  v_at TIMESTAMPTZ;
  v_text TEXT;
  v_delay NUMERIC;
BEGIN
  IF p_op ? 'deliverAt' AND p_op ? 'delaySeconds' THEN
    PERFORM queen.fail_v1('timers_when_conflict',
      format('Operation %s: give either deliverAt or delaySeconds, not both.', p_index), p_index);
  ELSIF p_op ? 'deliverAt' THEN
    v_text := p_op ->> 'deliverAt';
    IF jsonb_typeof(p_op -> 'deliverAt') IS DISTINCT FROM 'string'
       -- Up to nine fraction digits: Java's Instant.toString and Go's RFC3339Nano write nanoseconds,
       -- .NET's "o" seven digits; all were refused while the rule stopped at six.
       OR v_text !~ '^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|z|[+-]\d{2}(:?\d{2})?)$' THEN
      PERFORM queen.fail_v1('timers_invalid_deliver_at',
        format('Operation %s: deliverAt must be an ISO 8601 timestamp with a zone, such as 2030-01-01T00:00:00Z.', p_index), p_index);
    END IF;
    BEGIN
      v_at := v_text::timestamptz;
    EXCEPTION WHEN OTHERS THEN
      PERFORM queen.fail_v1('timers_invalid_deliver_at',
        format('Operation %s: deliverAt %s is not a date that exists.', p_index, v_text), p_index);
    END;
  ELSIF p_op ? 'delaySeconds' THEN
    IF jsonb_typeof(p_op -> 'delaySeconds') IS DISTINCT FROM 'number' OR (p_op ->> 'delaySeconds')::numeric < 0 THEN
      PERFORM queen.fail_v1('timers_invalid_delay',
        format('Operation %s: delaySeconds must be a number of seconds, 0 or more.', p_index), p_index);
    END IF;
    v_delay := (p_op ->> 'delaySeconds')::numeric;
    -- Rounded to microseconds (the timestamp's own precision) first: a tiny positive delay such as
    -- 1e-400 is a valid numeric but underflows double precision, which raised 22003 (a 400
    -- invalid_json echoing the whole number) instead of meaning "now". A delay past the horizon is
    -- never made an interval (a huge one overflows it): it is refused below, as a deliverAt is.
    v_at := CASE WHEN v_delay > v_horizon THEN 'infinity'
                 ELSE p_now + make_interval(secs => round(v_delay, 6)::double precision) END;
  ELSE
    PERFORM queen.fail_v1('timers_when_required',
      format('Operation %s: say when, with deliverAt (ISO 8601) or delaySeconds.', p_index), p_index);
  END IF;
  -- deliverAt is a floor and the wire's precision is the millisecond: a sub-millisecond instant
  -- rounds up to the next millisecond (.123999 delivers at .124, as the answer says), never down to
  -- an instant before the one asked for.
  IF p_op ? 'deliverAt' THEN
    v_at := date_trunc('milliseconds', v_at + interval '999 microseconds');
  END IF;
  IF v_at > p_now + make_interval(secs => v_horizon) THEN
    PERFORM queen.fail_v1('timers_beyond_horizon',
      format('Operation %s: a timer may be at most %s seconds ahead (QUEEN_TIMERS_MAX_HORIZON_SECONDS).', p_index, v_horizon), p_index);
  END IF;
  RETURN date_trunc('milliseconds', v_at);
END $function$
CREATE OR REPLACE FUNCTION queen.ts_v1(timestamp with time zone)
 RETURNS text
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT to_char($1 AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$function$
CREATE OR REPLACE FUNCTION queen.uuid_ok_v1(p_text text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT p_text IS NOT NULL AND p_text LIKE '________-____-____-____-____________' AND p_text ~ '^[0-9a-fA-F-]+$'
         AND p_text NOT LIKE '%-%-%-%-%-%'
$function$
CREATE OR REPLACE FUNCTION queen.uuid_pattern_v1()
 RETURNS text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
$function$
