// One LISTEN connection, kept up: connect, LISTEN on the channels, and after any loss (the server
// restarted, the connection was killed, a first attempt refused) reconnect with backoff, warning
// once per outage and saying when it is back. The API's switches, its long-polling pops and the
// sweeper each hold one; before this module each wrote its own connect-and-retry loop, each a
// little different.
//
// A notification is a hint: every user of a listener also reads the truth from the database (on
// a timer, on the next cycle, or in `onListening` after a loss, when a notification may have been
// missed while nobody listened).
import { Client } from 'pg';
import type { Logger } from './log';

/** The channels the cell announces on. The SQL that sends them names them too (pg_notify). */
export const CHANNEL = {
  /** A kill-switch flip: the rows written, with the flip's token (POST /api/v1/system/kv-timers). */
  systemState: 'queen_system_state',
  /** A push committed to the queue named in the payload (queen.log_append_v1: every push, and a fired timer). */
  log: 'queen_log',
} as const;

const FIRST_RETRY_MS = 1000;
// Capped low: a listener that is down leaves switch flips and pushes to be found by polling meanwhile.
const MAX_RETRY_MS = 2000;
/** A server that takes the TCP connection but never answers must not hold the retry forever. */
const CONNECT_TIMEOUT_MS = 5000;

export interface ListenerOptions {
  connectionString: string | undefined;
  applicationName: string;
  channels: readonly string[];
  /** Names the listener in its log lines: "switches", "log", "sweeper". */
  name: string;
  log: Logger;
  onNotification(channel: string, payload: string | undefined): void;
  /**
   * After every LISTEN that succeeds; `afterLoss` is true when a connection was lost (or an attempt
   * failed) since the last one, so a notification may have been missed. A throw counts as a loss.
   */
  onListening?(afterLoss: boolean): Promise<void> | void;
}

export class Listener {
  private client: Client | undefined;
  private attempt: Promise<void> | undefined;
  private retryTimer: NodeJS.Timeout | undefined;
  /** Failed attempts since the listener was last up (0 while it is up). */
  private failures = 0;
  private missed = false;
  private closed = false;

  constructor(private readonly o: ListenerOptions) {}

  get listening(): boolean {
    return this.client !== undefined;
  }

  /**
   * Connects unless already up, connecting or waiting to retry (retries keep their own schedule).
   * Never throws: it resolves when this attempt is over, listening or not.
   */
  start(): Promise<void> {
    if (this.closed || this.client || this.retryTimer) return this.attempt ?? Promise.resolve();
    this.attempt ??= this.connect().finally(() => (this.attempt = undefined));
    return this.attempt;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    await this.attempt?.catch(() => undefined);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => undefined);
  }

  private async connect(): Promise<void> {
    const { name, channels, log } = this.o;
    const client = new Client({
      connectionString: this.o.connectionString,
      application_name: this.o.applicationName,
      connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    });
    let lost = false;
    const onLost = (err?: Error) => {
      if (lost) return;
      lost = true;
      if (this.client === client) this.client = undefined;
      client.end().catch(() => undefined);
      if (this.closed) return;
      this.missed = true;
      const retryInMs = Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** Math.min(this.failures, 5));
      if (this.failures++ === 0) {
        log.warn({ listener: name, channels, err: err ? { message: err.message } : undefined, retryInMs }, `${name}: LISTEN connection lost; reconnecting`);
      }
      this.retryTimer = setTimeout(() => {
        this.retryTimer = undefined;
        void this.start();
      }, retryInMs);
      // The owner's server or loop keeps the process up; a pending retry alone must not.
      this.retryTimer.unref();
    };
    client.on('error', onLost);
    client.on('end', () => onLost());
    client.on('notification', (n) => this.o.onNotification(n.channel, n.payload));
    try {
      await client.connect();
      for (const channel of channels) await client.query(`LISTEN ${channel}`);
    } catch (err) {
      onLost(err as Error);
      return;
    }
    if (this.closed || lost) {
      await client.end().catch(() => undefined);
      return;
    }
    this.client = client;
    const afterLoss = this.missed;
    this.missed = false;
    try {
      await this.o.onListening?.(afterLoss);
    } catch (err) {
      onLost(err as Error);
      return;
    }
    if (this.failures > 0) {
      log.info({ listener: name, attempts: this.failures }, `${name}: LISTEN restored`);
      this.failures = 0;
    }
  }
}
