// One contended key cannot take the KV pool from the others. Writes to one key wait on its row
// lock (another session's transaction, a transaction-wire bundle holding it), each waiting caller
// holding a KV connection the while: enough of them drained the pool, and unrelated keys were
// refused "KV connection pool is exhausted" (2026-12-02). So, per worker, at most a quarter of the
// KV pool (at least one) may be writing one key at once; the next callers for that key wait their
// turn here, holding no connection, for at most QUEEN_KV_ACQUIRE_TIMEOUT_MS, then are 503
// kv_key_busy with Retry-After. Reads take no row lock and are not counted.
import { ApiError } from '../../../shared/errors';

/** The share of the KV pool one key's writers may hold. */
export const KEY_SHARE_OF_POOL = 0.25;

export class KeyWaiters {
  private readonly writing = new Map<string, number>();
  private readonly queued = new Map<string, Array<() => void>>();
  readonly perKey: number;

  /** `waitMs`: how long a caller may wait its turn for a key, holding no connection (QUEEN_KV_ACQUIRE_TIMEOUT_MS). */
  constructor(poolMax: number, private readonly waitMs: number) {
    this.perKey = Math.max(1, Math.floor(poolMax * KEY_SHARE_OF_POOL));
  }

  /**
   * Counts the call's write keys in, waiting (at most waitMs, with no connection) while a key already
   * has perKey writers, then 503 kv_key_busy; the returned release counts them out (call it once).
   */
  async enter(tenant: string, keys: Iterable<[string, string]>): Promise<() => void> {
    const names = [...new Set([...keys].map(([ns, key]) => `${tenant}\u0000${ns}\u0000${key}`))];
    const deadline = Date.now() + this.waitMs;
    for (;;) {
      const full = names.find((name) => (this.writing.get(name) ?? 0) >= this.perKey);
      if (full === undefined) break;
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new ApiError('kv_key_busy', `As many calls as may (${this.perKey}, a quarter of the KV pool) were writing this key for ${this.waitMs} ms (QUEEN_KV_ACQUIRE_TIMEOUT_MS); retry shortly.`, { retryAfterSeconds: 1 });
      }
      await new Promise<void>((resolve) => {
        const wake = () => {
          clearTimeout(timer);
          resolve();
        };
        const timer = setTimeout(() => {
          const list = this.queued.get(full);
          const at = list?.indexOf(wake) ?? -1;
          if (list && at >= 0) list.splice(at, 1);
          if (list?.length === 0) this.queued.delete(full);
          resolve();
        }, left);
        const list = this.queued.get(full) ?? [];
        list.push(wake);
        this.queued.set(full, list);
      });
    }
    for (const name of names) this.writing.set(name, (this.writing.get(name) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      for (const name of names) {
        const n = (this.writing.get(name) ?? 1) - 1;
        if (n <= 0) this.writing.delete(name);
        else this.writing.set(name, n);
        const list = this.queued.get(name);
        const next = list?.shift();
        if (list?.length === 0) this.queued.delete(name);
        next?.();
      }
    };
  }
}

const WRITES = new Set(['put', 'putIfAbsent', 'delete', 'incr']);

/** The (namespace, key) pairs a batch's operations write; anything malformed is left to SQL. */
export function writeKeys(ops: unknown): Array<[string, string]> {
  if (!Array.isArray(ops)) return [];
  const out: Array<[string, string]> = [];
  for (const op of ops) {
    if (typeof op !== 'object' || op === null) continue;
    const { op: name, ns, key } = op as Record<string, unknown>;
    if (typeof name === 'string' && WRITES.has(name) && typeof ns === 'string' && typeof key === 'string') out.push([ns, key]);
  }
  return out;
}
