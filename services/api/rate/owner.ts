// The cluster primary's side of the rate limits: it answers its workers' lease requests
// (rate/lease.ts) from the cell's shared buckets (rate/store.ts), and tells every worker whether the
// process is on its local fallback, for the queen_kv_rate_store_fallback gauge.
import cluster, { Worker } from 'node:cluster';
import type { LeaseAsk, RateScope } from './limit';
import { RATE_IPC } from './lease';
import type { RateStore } from './store';

const SCOPES = new Set<RateScope>(['tenant_reads', 'tenant_writes', 'cell']);

interface AskMessage {
  type?: string;
  id?: number;
  tenant?: unknown;
  asks?: unknown;
}

function send(worker: Worker, message: unknown): void {
  if (!worker.isConnected()) return;
  worker.send(message as object, (err: Error | null) => void err);
}

/** Only well-formed asks reach the store (a worker is ours, but the channel is not a place to trust shapes). */
function validAsks(asks: unknown): LeaseAsk[] | undefined {
  if (!Array.isArray(asks) || asks.length > 3) return undefined;
  const out: LeaseAsk[] = [];
  for (const a of asks) {
    const { scope, need, want, give } = (a ?? {}) as Record<string, unknown>;
    if (!SCOPES.has(scope as RateScope)) return undefined;
    if (![need, want, give].every((n) => typeof n === 'number' && Number.isFinite(n) && n >= 0)) return undefined;
    out.push({ scope: scope as RateScope, need: need as number, want: Math.max(need as number, want as number), give: give as number });
  }
  return out;
}

export function ownRateLimitsInPrimary(store: RateStore): () => void {
  const onMessage = (worker: Worker, message: AskMessage) => {
    if (!message || typeof message !== 'object' || typeof message.tenant !== 'string') return;
    if (message.type !== RATE_IPC.ask && message.type !== RATE_IPC.give) return;
    const asks = validAsks(message.asks);
    if (!asks) return;
    const id = message.id;
    store.lease(message.tenant, asks).then((grants) => {
      if (message.type === RATE_IPC.ask) send(worker, { type: RATE_IPC.grant, id, grants });
    });
  };
  const onListening = (worker: Worker) => send(worker, { type: RATE_IPC.mode, ...store.mode });
  store.onMode((mode) => {
    for (const w of Object.values(cluster.workers ?? {})) if (w) send(w, { type: RATE_IPC.mode, ...mode });
  });
  cluster.on('message', onMessage);
  cluster.on('listening', onListening);
  return () => {
    cluster.off('message', onMessage);
    cluster.off('listening', onListening);
  };
}
