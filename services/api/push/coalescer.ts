// Group commit for POST /api/v1/push. Pushes to one partition are serialised by its row lock, held
// through commit so that seq order is commit order: on a busy partition every push waits for each
// push before it to lock, write, commit and hand the lock on, and each hand-over is a backend that
// must be woken and given a core. On a loaded machine that wake-up is what a push costs, so a flood
// of anything else slowed the message path far more than its share of the CPU.
//
// So, per worker: while a push to a partition is in flight, later one-item pushes to the same
// partition wait here, and go together as one statement (queen.log_push_coalesced_v1) when it
// returns: one lock, one commit, each request still answered its own results. A push that finds
// nothing in flight for its partition goes at once, so a quiet cell adds no latency. Each request
// keeps its own rules: the fast path takes the bodies in one call; a body it declines (the partition
// does not exist yet, a name or transactionId the general path would refuse) is sent alone afterwards, as is every body
// of a gathering PostgreSQL refused for what one body held (invalid jsonb text, a number out of
// range, nesting past the stack depth: SQLSTATE classes 22, 23 and 54; the statement rolled back,
// so nothing is pushed twice), so one malformed request never answers for the others. Any other
// failure (the pool, the connection, a timeout) is every waiting request's answer.
import type { Pool } from 'pg';
import { LOG_PUSH, LOG_PUSH_COALESCED, LOG_PUSH_COALESCED_TRACED, LOG_PUSH_TRACED } from '../../../shared/sql/log';
import { since } from '../../../shared/db';

/** At most this many requests, or about this many bytes of bodies, go in one statement. */
export const COALESCE_LIMITS = { requests: 100, bytes: 1 << 20 } as const;

/** SQLSTATE classes a body's content can cause: data exception, integrity, program limit. */
const REFUSED_FOR_A_BODY = /^(22|23|54)[0-9A-Z]{3}$/;

interface Waiting {
  tenant: string;
  text: string;
  /** When the request arrived: its bound (shared/db.ts, boundCalls) counts from here, the wait here included. */
  at: number;
  /** Trace context to store (LOG_PUSH_TRACED's $4), or undefined: none. */
  trace: string | undefined;
  resolve(results: string): void;
  reject(err: unknown): void;
}

/** The tenant's partition a one-item push goes to, or undefined when the request is anything else. */
function partitionOf(tenant: string, body: Record<string, unknown>): string | undefined {
  const items = body.items;
  if (!Array.isArray(items) || items.length !== 1) return undefined;
  const item = items[0] as Record<string, unknown> | null;
  if (typeof item !== 'object' || item === null || Array.isArray(item) || typeof item.queue !== 'string') return undefined;
  const partition = item.partition ?? 'Default';
  return typeof partition === 'string' ? `${tenant}\u0000${item.queue}\u0000${partition}` : undefined;
}

export class PushCoalescer {
  /** Partitions with a push in flight from this worker, and the pushes waiting on each. */
  private readonly inFlight = new Map<string, Waiting[]>();

  /** `onStatement` hears how many pushes each statement to a partition carried (a metric). */
  constructor(
    private readonly pool: Pool,
    private readonly onStatement: (pushes: number) => void = () => undefined,
  ) {}

  /**
   * A push's results array as JSON text. `tenant` owns it (a gathering is one tenant's); `text` is
   * the request body; `body` is it parsed (an object). `trace`: the trace context the messages
   * store (the request's span as JSON, or 'null' when only items carry a traceId), or undefined
   * for none: such a push sends the statements it always did (docs/tracing.md).
   */
  push(tenant: string, text: string, body: Record<string, unknown>, trace?: string): Promise<string> {
    const partition = partitionOf(tenant, body);
    const at = Date.now();
    if (partition === undefined || text.length > COALESCE_LIMITS.bytes) return this.alone(tenant, text, at, trace);
    const waiting = this.inFlight.get(partition);
    if (waiting) return new Promise((resolve, reject) => waiting.push({ tenant, text, at, trace, resolve, reject }));
    this.inFlight.set(partition, []);
    this.onStatement(1);
    return this.alone(tenant, text, at, trace).finally(() => this.next(partition));
  }

  private async alone(tenant: string, text: string, at: number, trace: string | undefined): Promise<string> {
    const { rows } = await this.pool.query(since(trace === undefined
      ? { ...LOG_PUSH, values: [tenant, text] }
      : { ...LOG_PUSH_TRACED, values: [tenant, text, null, trace] }, at));
    return rows[0].results;
  }

  /** Sends what gathered while the last statement for this partition was in flight. */
  private next(partition: string): void {
    const waiting = this.inFlight.get(partition)!;
    if (waiting.length === 0) return void this.inFlight.delete(partition);
    let bytes = 0;
    let n = 0;
    while (n < waiting.length && n < COALESCE_LIMITS.requests && bytes + waiting[n].text.length <= COALESCE_LIMITS.bytes) bytes += waiting[n++].text.length;
    const batch = waiting.splice(0, Math.max(n, 1));
    const sendAlone = (w: Waiting) => this.alone(w.tenant, w.text, w.at, w.trace).then(w.resolve, w.reject);
    this.onStatement(batch.length);
    // What gathered meanwhile goes before this gathering is answered: the partition's next
    // statement is the message path's critical path; the answers are not.
    // One partition key is one tenant's: the batch's first request names it for all.
    // Bounded from the earliest arrival in it (the first: they wait in order), so none outlives its bound.
    // A gathering of which a request has trace context stamps each body's messages with its own.
    const bodies = `[${batch.map((w) => w.text).join(',')}]`;
    const statement = batch.some((w) => w.trace !== undefined)
      ? { ...LOG_PUSH_COALESCED_TRACED, values: [batch[0].tenant, bodies, `[${batch.map((w) => w.trace ?? 'null').join(',')}]`] }
      : { ...LOG_PUSH_COALESCED, values: [batch[0].tenant, bodies] };
    this.pool.query<{ results: string | null }>(since(statement, batch[0].at)).then(
      ({ rows }) => {
        this.next(partition);
        batch.forEach((w, i) => (rows[i].results === null ? sendAlone(w) : w.resolve(rows[i].results!)));
      },
      (err: { code?: string }) => {
        this.next(partition);
        batch.forEach((w) => (REFUSED_FOR_A_BODY.test(err?.code ?? '') ? sendAlone(w) : w.reject(err)));
      },
    );
  }
}
