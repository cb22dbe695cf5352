// What a KV or timer call costs, read from its parsed body before anything runs: the rate tokens
// (one per operation) and what it may add to the tenant's occupancy (the quota's local delta). The
// body is not trusted here: whatever the SQL will refuse is charged nothing, so a malformed call
// never drains the caller's bucket. admission/guards.ts asks; nothing here refuses.
import { KV_ADDING_OPS as ADDING_OPS, KV_READ_OPS as READ_OPS } from '../../../shared/kvOps';
import { isPlainObject } from '../edge/body';
import type { Delta } from './tenantBook';

export interface KvCost {
  reads: number;
  writes: number;
  /** What the writes may add to occupancy, counted conservatively: every put is a new row until measured. */
  delta: Delta;
}

/**
 * One operation is one token. An unknown op, or a batch over the limit, is charged nothing: the SQL
 * refuses it with a 400 and a malformed call should not drain the caller's bucket.
 */
export function kvCost(ops: unknown, maxBatch: number, measureBytes = true): KvCost {
  const cost: KvCost = { reads: 0, writes: 0, delta: { rows: 0, bytes: 0, timers: 0 } };
  if (!Array.isArray(ops) || ops.length > maxBatch) return cost;
  for (const op of ops) {
    const name = isPlainObject(op) ? op.op : undefined;
    if (typeof name !== 'string') continue;
    if (READ_OPS.has(name)) cost.reads++;
    else if (name === 'delete') cost.writes++;
    else if (ADDING_OPS.has(name)) {
      cost.writes++;
      const o = op as Record<string, unknown>;
      cost.delta.rows++;
      if (measureBytes) cost.delta.bytes += approximateBytes(o.value) + (typeof o.key === 'string' ? Buffer.byteLength(o.key) : 0);
    }
  }
  return cost;
}

/**
 * The size a value will take, for the quota's local delta only. A value nested deeper than
 * JSON.stringify can walk is refused by PostgreSQL anyway (a 400), so it counts as nothing here.
 */
function approximateBytes(value: unknown): number {
  try {
    return Buffer.byteLength(JSON.stringify(value ?? 0) ?? '');
  } catch {
    return 0;
  }
}

/** Timer ops inside the wire: schedule adds a timer, reschedule is billed like one, cancel is free and never gated. */
export function timerCounts(ops: unknown): { schedules: number; reschedules: number } {
  const counts = { schedules: 0, reschedules: 0 };
  if (!Array.isArray(ops)) return counts;
  for (const op of ops) {
    const name = isPlainObject(op) ? op.op : undefined;
    if (name === 'schedule') counts.schedules++;
    else if (name === 'reschedule') counts.reschedules++;
  }
  return counts;
}
