// Wakes long-polling pops when a push commits. queen.log_append_v1 (every push, and a fired timer)
// does NOTIFY queen_log, '<tenant>/<queue>'; one LISTEN connection per API worker fans the notification out to the pops
// waiting on that tenant's queue (another tenant's queue of the same name wakes no one).
// A notification is a hint, never the truth: the pop that wakes asks the database again, and the
// waiters also wake on a short interval, which covers what sends no notification (an expired lease,
// a `failed` ack that released its partition) and a listener that lost its connection.
import { CHANNEL, Listener } from '../../../shared/listener';
import type { Logger } from '../../../shared/log';

export interface Armed {
  /** Resolves on a push to the queue, after `ms`, or when the signal closes; whichever comes first. */
  wait(ms: number): Promise<void>;
  cancel(): void;
}

export class PushSignal {
  private readonly listener: Listener;
  private readonly waiters = new Map<string, Set<() => void>>();
  private closed = false;

  constructor(databaseUrl: string | undefined, log: Logger) {
    // Connected on the first long poll, not at boot: a worker that never long-polls holds no
    // LISTEN connection.
    this.listener = new Listener({
      connectionString: databaseUrl,
      applicationName: 'queen-api-listen',
      channels: [CHANNEL.log],
      name: 'log',
      log,
      onNotification: (_channel, queue) => {
        if (queue !== undefined) this.wake(queue);
      },
    });
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /**
   * Registers interest in `queue` before the caller looks, so a push that commits between the look
   * and the wait still wakes it. Never throws: without a listener, the wait is a timed poll.
   */
  async arm(tenant: string, queueName: string): Promise<Armed> {
    const queue = `${tenant}/${queueName}`;
    // Without a listener (down, reconnecting) the wait is a timed poll.
    await this.listener.start();
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
    await this.listener.close();
  }
}
