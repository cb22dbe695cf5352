// The statements behind the operator surface: the kill-switch mirror in queen.system_state and the
// in-process caches of queen.kv_quota (configuration) and queen.kv_usage (the sweeper's measurement).
// Named, so each is planned once per connection; none of them runs on a request's path except the
// two operator routes.
import { CHANNEL } from '../listener';

/** The three switch rows. An absent row means on. */
export const SWITCHES_READ = {
  name: 'system_switches_read_v1',
  text: `SELECT key, value::text AS value FROM queen.system_state
          WHERE key IN ('kv_enabled', 'timers_schedule_enabled', 'timers_fire_enabled')`,
};

/**
 * Writes the given switch rows ($1 is a jsonb object key -> true/false) and announces them in the
 * same statement, the rows and the flip's token ($2) as the payload: NOTIFY is delivered at commit,
 * in commit order, so a listener that applies payloads as they come ends where the table ends.
 */
export const SWITCHES_WRITE = {
  name: 'system_switches_write_v2',
  text: `WITH written AS (
           INSERT INTO queen.system_state (key, value, updated_at)
           SELECT e.key, e.value, now() FROM jsonb_each($1::jsonb) AS e
           ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at
           RETURNING key)
         SELECT count(*)::int AS written,
                pg_notify('${CHANNEL.systemState}', jsonb_build_object('token', $2::text, 'rows', $1::jsonb)::text) AS notified
           FROM written`,
};

/** Every grant and limit: configuration, small, read in full on a short cadence. */
export const QUOTA_READ_ALL = {
  name: 'system_quota_read_all_v1',
  text: `SELECT tenant_id::text AS tenant, granted, enabled,
                max_rows::text AS max_rows, max_bytes::text AS max_bytes, max_timers::text AS max_timers
           FROM queen.kv_quota`,
};

/**
 * The sweeper's last measurement per tenant; computed_at in epoch milliseconds, and read_ms the
 * database's clock at this read (now(): this statement's start, after the worker sent it), so
 * the worker can place computed_at on its own clock from below (services/api/admission/tenantBook.ts).
 */
/**
 * The tenants moving between cells (migration 057, docs/scaling.md): each one's data calls are refused
 * here with 503 tenant_moving while its row stands. Read with the grants, every QUOTA_REFRESH_MS.
 */
export const MOVES_READ_ALL = {
  name: 'system_moves_read_all_v1',
  text: `SELECT tenant_id::text AS tenant, role FROM queen.tenant_moves`,
};

export const USAGE_READ_ALL = {
  name: 'system_usage_read_all_v2',
  text: `SELECT tenant_id::text AS tenant, rows::text AS rows, bytes::text AS bytes, timers::text AS timers,
                timer_bytes::text AS timer_bytes,
                (extract(epoch FROM computed_at) * 1000)::float8 AS computed_ms,
                (extract(epoch FROM now()) * 1000)::float8 AS read_ms
           FROM queen.kv_usage`,
};

/** GET /api/v1/system/cluster: the totals a proxy adds to its storage quota, and the per-tenant rows. */
export const CLUSTER_USAGE = {
  name: 'system_cluster_usage_v1',
  text: `SELECT coalesce(sum(bytes), 0)::text AS kv_bytes,
                coalesce(sum(timer_bytes), 0)::text AS timer_bytes,
                coalesce(jsonb_agg(jsonb_build_object(
                  'tenantId', tenant_id, 'rows', rows, 'bytes', bytes, 'timers', timers,
                  'timerBytes', timer_bytes, 'computedAt', queen.ts_v1(computed_at))
                  ORDER BY tenant_id), '[]'::jsonb)::text AS tenants
           FROM queen.kv_usage`,
};
