// The KV's seven operations, named once: the routes accept them, the rate limiter charges them and
// the counters label them (the SQL's own list is queen.kv_check_op_v1's).
export const KV_OPS = ['get', 'getMany', 'getPrefix', 'put', 'putIfAbsent', 'delete', 'incr'] as const;
export type KvOp = (typeof KV_OPS)[number];

const KNOWN: ReadonlySet<string> = new Set(KV_OPS);
/** The operations that read: one read token each. */
export const KV_READ_OPS: ReadonlySet<string> = new Set<KvOp>(['get', 'getMany', 'getPrefix']);
/** The writes that may add a row (delete only removes): what occupancy counts before a measurement. */
export const KV_ADDING_OPS: ReadonlySet<string> = new Set<KvOp>(['put', 'putIfAbsent', 'incr']);

export function isKvOp(name: unknown): name is KvOp {
  return typeof name === 'string' && KNOWN.has(name);
}
