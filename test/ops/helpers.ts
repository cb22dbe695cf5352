// What the operations suites share: writing what an operator or the sweeper would write (grants,
// limits, measurements), and a KV put of the suites' namespace.
import { TestApi } from '../support/api';
import { sql } from '../support/database';

/** Writes a grant row as an operator would, then makes the API re-read its copy now. */
export async function grant(
  api: TestApi,
  tenant: string,
  row: { granted?: boolean; enabled?: boolean; maxRows?: number | null; maxBytes?: number | null; maxTimers?: number | null } = {},
): Promise<void> {
  await sql(
    api.databaseUrl,
    `INSERT INTO queen.kv_quota (tenant_id, granted, enabled, max_rows, max_bytes, max_timers)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (tenant_id) DO UPDATE SET granted = EXCLUDED.granted, enabled = EXCLUDED.enabled,
       max_rows = EXCLUDED.max_rows, max_bytes = EXCLUDED.max_bytes, max_timers = EXCLUDED.max_timers, updated_at = now()`,
    [tenant, row.granted ?? true, row.enabled ?? true, row.maxRows ?? null, row.maxBytes ?? null, row.maxTimers ?? null],
  );
  await api.server.ops.book.refresh();
}

/** Writes a usage measurement as the sweeper's rollup would, stamped now, then makes the API read it. */
export async function measure(api: TestApi, tenant: string, usage: { rows?: number; bytes?: number; timers?: number; timerBytes?: number }): Promise<void> {
  await sql(
    api.databaseUrl,
    `INSERT INTO queen.kv_usage (tenant_id, rows, bytes, timers, timer_bytes, computed_at)
     VALUES ($1, $2, $3, $4, $5, clock_timestamp())
     ON CONFLICT (tenant_id) DO UPDATE SET rows = EXCLUDED.rows, bytes = EXCLUDED.bytes, timers = EXCLUDED.timers,
       timer_bytes = EXCLUDED.timer_bytes, computed_at = EXCLUDED.computed_at`,
    [tenant, usage.rows ?? 0, usage.bytes ?? 0, usage.timers ?? 0, usage.timerBytes ?? 0],
  );
  await api.server.ops.book.refresh();
}

export const put = (key: string, value: unknown = 1) => ({ op: 'put', ns: 'ops', key, value, forever: true });
