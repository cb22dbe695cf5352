// Wakes long-polling pops when a push commits. queen.log_push_v1 does NOTIFY queen_log,
// '<tenant>/<queue>'; one LISTEN connection per API worker fans the notification out to the pops
// waiting on that tenant's queue (another tenant's queue of the same name wakes no one).
// A notification is a hint, never the truth: the pop that wakes asks the database again, and the
// waiters also wake on a short interval, which covers what sends no notification (an expired lease,
// a `failed` ack that released its partition) and a listener that lost its connection.
import { Client } from 'pg';
import type { Logger } from '../../shared/log';

export const PUSH_CHANNEL = 'queen_log';

export interface Armed {
  /** Resolves on a push to the queue, after `ms`, or when the signal closes; whichever comes first. */
  wait(ms: number): Promise<void>;
  cancel(): void;
}

export class PushSignal {
  private client: Client | undefined;
  private connecting: Promise<void> | undefined;
  private readonly waiters = new Map<string, Set<() => void>>();
  private closed = false;

  constructor(
    private readonly databaseUrl: string | undefined,
    private readonly log: Logger,
  ) {}

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * Registers interest in `queue` before the caller looks, so a push that commits between the look
   * and the wait still wakes it. Never throws: without a listener, the wait is a timed poll.
   */
  async arm(tenant: string, queueName: string): Promise<Armed> {
    const queue = `${tenant}/${queueName}`;
    await this.listen().catch((err) => this.log.warn({ err }, 'log: LISTEN unavailable, long polls fall back to short polling'));
    let wake: () => void = () => undefined;
    let woken = false;
    const fired = new Promise<void>((resolve) => {
      wake = () => {
        woken = true;
        resolve();
      };
    });
    const set = this.waiters.get(queue) ?? new Set();
    set.add(wake);
    this.waiters.set(queue, set);
    const cancel = () => {
      set.delete(wake);
      if (set.size === 0 && this.waiters.get(queue) === set) this.waiters.delete(queue);
    };
    return {
      cancel,
      wait: async (ms) => {
        if (!woken && !this.closed) {
          let timer: NodeJS.Timeout | undefined;
          await Promise.race([fired, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
          clearTimeout(timer);
        }
        cancel();
      },
    };
  }

  private listen(): Promise<void> {
    if (this.closed || this.client) return Promise.resolve();
    this.connecting ??= (async () => {
      const client = new Client({ connectionString: this.databaseUrl, application_name: 'queen-api-listen' });
      client.on('notification', (msg) => {
        if (msg.channel === PUSH_CHANNEL && msg.payload !== undefined) this.wake(msg.payload);
      });
      client.on('error', (err) => {
        this.log.warn({ err }, 'log: LISTEN connection lost; reconnecting on the next long poll');
        if (this.client === client) this.client = undefined;
        client.end().catch(() => undefined);
      });
      try {
        await client.connect();
        await client.query(`LISTEN ${PUSH_CHANNEL}`);
      } catch (err) {
        await client.end().catch(() => undefined);
        throw err;
      }
      if (this.closed) {
        await client.end().catch(() => undefined);
        return;
      }
      this.client = client;
    })().finally(() => {
      this.connecting = undefined;
    });
    return this.connecting;
  }

  private wake(queue: string): void {
    const set = this.waiters.get(queue);
    if (!set) return;
    for (const wake of [...set]) wake();
  }

  /** Wakes every waiter (their pops answer at once) and ends the LISTEN connection. */
  async close(): Promise<void> {
    this.closed = true;
    for (const set of this.waiters.values()) for (const wake of [...set]) wake();
    this.waiters.clear();
    await this.connecting?.catch(() => undefined);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }
}
