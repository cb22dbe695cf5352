// A cluster worker's side of the cell's buckets: it holds leases, tokens its primary took from the
// cell's buckets for it, and spends them without awaiting anything. Only a call that needs more
// than its leases hold asks the primary (one IPC round trip, shared by the calls that arrive while
// it is out), and the answer brings a chunk: the call's shortfall plus LEASE_SECONDS of the rate.
// A refused ask leaves a mirror of the bucket (its level and rate), so calls that follow are
// refused here, without asking, until the mirror says the bucket could pay them.
//
// Tokens leased and not spent within LEASE_TTL_MS go back to the primary: a worker that goes idle
// does not sit on the tenant's rate. Every wait on the primary is bounded (ASK_TIMEOUT_MS): past it
// the call is a 503 kv_unavailable with Retry-After, never admitted unchecked.
import { performance } from 'node:perf_hooks';
import type { Config } from '../../../shared/config';
import {
  Admission,
  bucketTenant,
  callCosts,
  cellLimits,
  exceedsBurst,
  LeaseAsk,
  LeaseGrant,
  RateDecision,
  refilled,
  RateScope,
  ScopeLimit,
  wholeSeconds,
} from './limit';

/** A chunk is this much of the bucket's rate: 50 ms, so a busy tenant costs ~20 IPC asks a second per worker. */
export const LEASE_SECONDS = 0.05;
/**
 * Once a bucket is drained (an answer paid less than asked), a worker asks again only when its
 * mirror shows this much of the rate, and asks for all of it: about 4 asks a second for a flooded
 * bucket, each an IPC round trip, a statement and ~1.4 ms of the primary's CPU. At 50 ms, the
 * isolation flood cost ~64 asks a second and the primary 0.09 of a core (2026-12-02).
 */
export const DRAINED_SECONDS = 0.25;
/** Unspent leased tokens go back after this. */
export const LEASE_TTL_MS = 1000;
/** A call waits for at most this many other calls' asks before it asks for itself. */
const MAX_WAITS = 2;
/** A call asks for itself at most this many times; past that, a bucket it is still short of is a 429. */
const MAX_ASKS = 2;
/** The longest a call waits for its primary's answer. */
export const ASK_TIMEOUT_MS = 2000;

export const RATE_IPC = {
  ask: 'queen:rate:ask', // worker -> primary: {id, tenant, asks: LeaseAsk[]}
  grant: 'queen:rate:grant', // primary -> worker: {id, grants: LeaseGrant[]}
  give: 'queen:rate:give', // worker -> primary: {tenant, asks} with need 0 (unspent tokens handed back)
  mode: 'queen:rate:mode', // primary -> workers: {fallback, processes}
} as const;

export interface RateMode {
  /** True while this process cannot reach the shared buckets and enforces its local share. */
  fallback: boolean;
  processes: number;
}

interface Lease {
  tokens: number;
  expires: number;
  /** The bucket as the last answer left it: its level, when, and its rate (undefined: never asked). */
  mirror?: { level: number; at: number; ratePerSec: number };
  /** The last answer paid less than the ask wanted: the bucket is drained, refilling token by token. */
  drained?: boolean;
}

interface IpcMessage {
  type?: string;
  id?: number;
  grants?: LeaseGrant[];
  fallback?: boolean;
  processes?: number;
}

export class LeaseLimiter implements Admission {
  private readonly limits: Record<RateScope, ScopeLimit>;
  private readonly leases = new Map<string, Lease>();
  private readonly asking = new Map<string, Promise<Set<RateScope> | undefined>>();
  private readonly pending = new Map<number, (grants: LeaseGrant[] | undefined) => void>();
  private nextId = 0;

  constructor(config: Config, onMode: (mode: RateMode) => void, private readonly onAsk: () => void = () => undefined) {
    this.limits = cellLimits(config);
    process.on('message', (m: IpcMessage) => {
      if (!m || typeof m !== 'object') return;
      if (m.type === RATE_IPC.grant && typeof m.id === 'number') {
        const resolve = this.pending.get(m.id);
        this.pending.delete(m.id);
        resolve?.(Array.isArray(m.grants) ? m.grants : undefined);
      } else if (m.type === RATE_IPC.mode) {
        onMode({ fallback: m.fallback === true, processes: Number(m.processes) || 1 });
      }
    });
    setInterval(() => this.returnExpired(), LEASE_TTL_MS / 2).unref();
  }

  bursts(): Record<RateScope, number> {
    return { tenant_reads: this.limits.tenant_reads.burst, tenant_writes: this.limits.tenant_writes.burst, cell: this.limits.cell.burst };
  }

  private lease(tenant: string, scope: RateScope): Lease {
    const key = `${scope}\u0000${bucketTenant(scope, tenant)}`;
    let l = this.leases.get(key);
    if (!l) {
      l = { tokens: 0, expires: 0 };
      this.leases.set(key, l);
    }
    return l;
  }

  /** What the bucket holds now by the mirror, if nothing else took from it since; Infinity when unknown. */
  private mirrored(l: Lease, scope: RateScope, now: number): number {
    if (!l.mirror) return Infinity;
    return refilled(l.mirror.level, now - l.mirror.at, l.mirror.ratePerSec, this.limits[scope].burst);
  }

  /** The mirror, moved to `now`, less `n` tokens this worker is about to take. */
  private spendMirror(l: Lease, scope: RateScope, n: number, now: number): void {
    if (!l.mirror) return;
    l.mirror = { level: this.mirrored(l, scope, now) - n, at: now, ratePerSec: l.mirror.ratePerSec };
  }

  /**
   * Seconds until the bucket, by its mirror, holds `short` more tokens (and, once drained, a
   * drained chunk); 0 when it may already. A bucket drained by a flood refills a token at a time:
   * asking as soon as one is there made every token an IPC round trip and a statement on the shared
   * store (200 a second for a 200/s limit, with calls piling onto each ask). Asking once
   * DRAINED_SECONDS of the rate is there takes the same tokens in a fiftieth of the asks; what waits
   * meanwhile is refused from the mirror, and admits no less over a second. Only after an answer
   * that paid less than it was asked for: a bucket with room is asked as soon as it can pay the call.
   */
  private mirrorWait(l: Lease, scope: RateScope, short: number, now: number): number {
    const level = this.mirrored(l, scope, now);
    const target = l.drained ? Math.max(short, this.drainedChunk(scope)) : short;
    if (level >= target) return 0;
    return (target - level) / l.mirror!.ratePerSec;
  }

  minimumWait(tenant: string, kind: 'read' | 'write'): RateDecision {
    const now = performance.now();
    let worst: { wait: number; scope?: RateScope } = { wait: 0 };
    for (const scope of [kind === 'read' ? 'tenant_reads' : 'tenant_writes', 'cell'] as RateScope[]) {
      const l = this.leases.get(`${scope}\u0000${bucketTenant(scope, tenant)}`);
      if (!l || l.tokens >= 1) continue;
      const wait = this.mirrorWait(l, scope, 1 - l.tokens, now);
      if (wait > worst.wait) worst = { wait, scope };
    }
    return worst.wait > 0 ? { retryAfterSeconds: wholeSeconds(worst.wait), scope: worst.scope } : { retryAfterSeconds: 0 };
  }

  admit(tenant: string, reads: number, writes: number): RateDecision | Promise<RateDecision> {
    if (reads + writes === 0) return { retryAfterSeconds: 0 };
    const over = exceedsBurst(this.limits, reads, writes);
    if (over) return over;
    return this.tryLeases(tenant, callCosts(reads, writes));
  }

  /**
   * Pays from the leases if they hold the whole call (no await); otherwise refuses from the mirrors
   * if they say the buckets cannot pay yet, or asks the primary and decides on its answer. A call is
   * refused (429) only on evidence: a mirror that says wait, or its own ask answered short for a
   * bucket it is still short of (`deniedBy`: the buckets whose grant fell short of the call's need).
   * Waiting on other calls' asks is no evidence (they may have been for other buckets, or timed
   * out), so after at most MAX_WAITS of them the call asks for itself; nor is a lease that expired
   * and went back while the call's ask was out (the cell tokens a put leased, say, while a read
   * asked for read tokens only): the call asks again, up to MAX_ASKS in all. An ask the primary
   * never answers is 503 kv_unavailable, never 429.
   */
  private tryLeases(
    tenant: string,
    costs: [RateScope, number][],
    waits = 0,
    deniedBy?: ReadonlySet<RateScope>,
    asks = 0,
  ): RateDecision | Promise<RateDecision> {
    const now = performance.now();
    const held = costs.map(([scope, n]) => ({ scope, n, l: this.lease(tenant, scope) }));
    for (const h of held) if (h.l.tokens > 0 && h.l.expires <= now) this.giveBack(tenant, h.scope, h.l);
    const short = held.filter((h) => h.l.tokens < h.n);
    if (short.length === 0) {
      for (const h of held) h.l.tokens -= h.n;
      // Ask ahead, in the background, when a lease runs low and its bucket may have tokens: the
      // next call then finds them here instead of waiting for the ask.
      if (!this.asking.has(tenant)) {
        const low = held.filter((h) => h.l.tokens < this.chunk(h.scope) / 2 && this.mirrorWait(h.l, h.scope, 1, now) === 0);
        if (low.length > 0) void this.startAsk(tenant, low.map((h) => ({ scope: h.scope, l: h.l, need: 1 })));
      }
      return { retryAfterSeconds: 0 };
    }
    let worst: { wait: number; scope?: RateScope } = { wait: 0 };
    for (const h of short) {
      const wait = this.mirrorWait(h.l, h.scope, h.n - h.l.tokens, now);
      if (wait > worst.wait) worst = { wait, scope: h.scope };
    }
    const denied = deniedBy !== undefined && (asks >= MAX_ASKS || short.some((h) => deniedBy.has(h.scope)));
    if (worst.wait > 0 || denied) {
      // Refused: what an ask just brought for the call's other buckets goes back now, all but a
      // lease's usual holding, rather than sitting here for a second while other workers wait.
      for (const h of held) {
        const excess = h.l.tokens - (1.5 * this.chunk(h.scope) + 1);
        if (excess > 0) this.giveBack(tenant, h.scope, h.l, excess);
      }
      return { retryAfterSeconds: wholeSeconds(Math.max(worst.wait, 0.001)), scope: worst.scope ?? short[0].scope };
    }
    // What this call is about to ask for (or wait on an ask for) comes off the mirrors now: the
    // calls behind it see the bucket as it will be once this one is served, and under a flood they
    // are refused by preflight() from the mirror instead of each taking the full path to a 429 while
    // the ask is out. The answer overwrites the mirror with the primary's own reading.
    for (const h of short) this.spendMirror(h.l, h.scope, h.n - h.l.tokens, now);
    // Calls arriving while an ask for the tenant is out wait for it and look again: usually it
    // brought enough for them too, and one IPC round trip served them all.
    const out = this.asking.get(tenant);
    if (out && waits < MAX_WAITS) return out.then(() => this.tryLeases(tenant, costs, waits + 1, undefined, asks));
    return this.startAsk(tenant, short.map((h) => ({ scope: h.scope, l: h.l, need: h.n - h.l.tokens }))).then((shortOf) =>
      shortOf ? this.tryLeases(tenant, costs, waits, shortOf, asks + 1) : { retryAfterSeconds: 1, unavailable: true },
    );
  }

  /** A chunk: LEASE_SECONDS of the bucket's rate, at least one token. */
  private chunk(scope: RateScope): number {
    return Math.max(1, this.limits[scope].ratePerSec * LEASE_SECONDS);
  }

  /** What a worker waits for, and asks for, once the bucket is drained: DRAINED_SECONDS of the rate, at most the burst. */
  private drainedChunk(scope: RateScope): number {
    return Math.min(this.limits[scope].burst, Math.max(1, this.limits[scope].ratePerSec * DRAINED_SECONDS));
  }

  /**
   * One ask for this tenant's short leases (`need` each, plus a chunk). Resolves to the buckets
   * whose grant fell short of `need` (empty: all paid), or undefined when the primary did not answer.
   */
  private startAsk(tenant: string, short: { scope: RateScope; l: Lease; need: number }[]): Promise<Set<RateScope> | undefined> {
    const asks: LeaseAsk[] = short.map((h) => ({
      scope: h.scope,
      need: h.need,
      want: Math.max(h.need, Math.min(this.limits[h.scope].burst - h.l.tokens, h.need + (h.l.drained ? this.drainedChunk(h.scope) : this.chunk(h.scope)))),
      give: 0,
    }));
    const asked = this.ask(tenant, asks).then((grants) => {
      if (this.asking.get(tenant) === asked) this.asking.delete(tenant);
      if (!grants) return undefined;
      const at = performance.now();
      const denied = new Set<RateScope>();
      short.forEach((h, i) => {
        const g = grants[i];
        if (!g || g.granted < h.need) denied.add(h.scope);
        if (!g) return;
        // The lease as the map holds it now: an empty one may have been forgotten (returnExpired)
        // while the ask was out, and a grant written into that orphan was lost: the call that asked
        // found an empty lease and was refused 429 with the bucket full (test/ops/rateCell.test.ts,
        // 'arriving together', 3 runs in 3 on a loaded machine).
        const l = this.lease(tenant, h.scope);
        // The lease expires a second after its oldest token came: no token stays here longer. Tokens
        // already past their time go back first, so the fresh grant does not inherit their expiry.
        if (l.tokens > 0 && l.expires <= at) this.giveBack(tenant, h.scope, l);
        if (g.granted > 0 && l.tokens <= 0) l.expires = at + LEASE_TTL_MS;
        l.tokens += g.granted;
        l.mirror = { level: g.level, at, ratePerSec: g.ratePerSec };
        l.drained = g.granted < asks[i].want;
      });
      return denied;
    });
    this.asking.set(tenant, asked);
    return asked;
  }

  private ask(tenant: string, asks: LeaseAsk[]): Promise<LeaseGrant[] | undefined> {
    if (!process.send || !process.connected) return Promise.resolve(undefined);
    this.onAsk();
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        resolve(undefined);
      }, ASK_TIMEOUT_MS);
      this.pending.set(id, (grants) => {
        clearTimeout(timer);
        resolve(grants);
      });
      process.send!({ type: RATE_IPC.ask, id, tenant, asks }, (err: Error | null) => {
        if (err && this.pending.delete(id)) {
          clearTimeout(timer);
          resolve(undefined);
        }
      });
    });
  }

  private giveBack(tenant: string, scope: RateScope, l: Lease, give = l.tokens): void {
    l.tokens -= give;
    if (give > 0 && process.send && process.connected) {
      process.send({ type: RATE_IPC.give, tenant, asks: [{ scope, need: 0, want: 0, give }] }, (err: Error | null) => void err);
    }
  }

  /** Hands back what expired, and forgets leases with nothing in them and an old mirror: the map holds active tenants only. */
  private returnExpired(): void {
    const now = performance.now();
    for (const [key, l] of this.leases) {
      if (l.tokens > 0 && l.expires <= now) {
        const [scope, tenant] = key.split('\u0000') as [RateScope, string];
        this.giveBack(tenant, scope, l);
      }
      if (l.tokens === 0 && (!l.mirror || now - l.mirror.at > 10_000)) this.leases.delete(key);
    }
  }
}
