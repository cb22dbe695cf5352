// The runtime kill switches (SPEC section 4, seeds "KV and timers"). Read on every call, so the
// state is a plain in-process object and reading it costs nothing. A flip lands in three places,
// in this order, because an operator pulling a lever during an incident must not wait on a
// database that may be the thing going wrong:
//   1. this worker, at once;
//   2. every sibling worker, through the cluster primary (worker -> primary -> all workers, IPC);
//   3. the queen.system_state rows, written and announced with NOTIFY queen_system_state, so that
//      other cells, restarted workers and the sweeper follow. `mirrored` says whether this worked.
// Each worker LISTENs on queen_system_state with one dedicated client, reads the rows at boot and on
// a reconnect, and applies each announcement's rows as it arrives. An absent row means on.
//
// Why a flip carries a token: announcements reach the listener later than the flip's own answer, so
// the announcement of an older flip (off) can arrive after a newer one (on) is already in force here.
// Until a worker has heard the announcement of a flip it applied itself (or heard from a sibling), that
// flip is kept on top of whatever the database says; announcements come in commit order, so once its
// own has arrived, the database's order is the order.
import { randomBytes } from 'node:crypto';
import cluster from 'node:cluster';
import { Client, Pool } from 'pg';
import type { Logger } from '../../shared/log';
import type { Metrics } from '../../shared/metrics';
import { LISTEN_SWITCHES, SWITCHES_READ, SWITCHES_WRITE } from '../../shared/sql/system';

export interface SwitchState {
  kv: boolean;
  timersSchedule: boolean;
  timersFire: boolean;
}

export type SwitchName = keyof SwitchState;
export const SWITCH_NAMES: readonly SwitchName[] = ['kv', 'timersSchedule', 'timersFire'];

/** The queen.system_state key of each switch. */
export const SWITCH_ROWS: Record<SwitchName, string> = {
  kv: 'kv_enabled',
  timersSchedule: 'timers_schedule_enabled',
  timersFire: 'timers_fire_enabled',
};

export const SWITCH_CHANNEL = 'queen_system_state';

/** The IPC message a worker sends the primary, and the primary sends every worker. */
export interface SwitchMessage {
  type: 'queen:switches';
  change: Partial<SwitchState>;
  from: number;
  token: string;
}

export function isSwitchMessage(msg: unknown): msg is SwitchMessage {
  return typeof msg === 'object' && msg !== null && (msg as SwitchMessage).type === 'queen:switches';
}

/**
 * The primary's side, and all of it: relay a worker's flip to every worker (the sender included;
 * applying the same change twice is harmless). main.ts calls this once.
 */
export function relaySwitchesInPrimary(): void {
  cluster.on('message', (_from, msg) => {
    if (!isSwitchMessage(msg)) return;
    for (const worker of Object.values(cluster.workers ?? {})) {
      if (worker && worker.isConnected()) worker.send(msg);
    }
  });
}

/** A row's value counts as off only when it is exactly jsonb false; anything else, or no row, is on. */
export function stateFromRows(rows: { key: string; value: string }[]): SwitchState {
  const off = new Set(rows.filter((r) => r.value.trim() === 'false').map((r) => r.key));
  return {
    kv: !off.has(SWITCH_ROWS.kv),
    timersSchedule: !off.has(SWITCH_ROWS.timersSchedule),
    timersFire: !off.has(SWITCH_ROWS.timersFire),
  };
}

/** An announcement written by SWITCHES_WRITE: the flip's token and the rows it wrote. */
interface Announcement {
  token: string;
  change: Partial<SwitchState>;
}

/** The payload of a queen_system_state notification, or undefined when it is not one of ours (re-read then). */
export function parseAnnouncement(payload: string | undefined): Announcement | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(payload ?? '');
  } catch {
    return undefined;
  }
  const { token, rows } = (parsed ?? {}) as { token?: unknown; rows?: unknown };
  if (typeof token !== 'string' || typeof rows !== 'object' || rows === null) return undefined;
  const change: Partial<SwitchState> = {};
  for (const name of SWITCH_NAMES) {
    const value = (rows as Record<string, unknown>)[SWITCH_ROWS[name]];
    // The same rule as a row: only false is off.
    if (value !== undefined) change[name] = value !== false;
  }
  return { token, change };
}

/** How long a flip heard from a sibling waits for its announcement (its writer may have failed). */
const UNANNOUNCED_MS = 10_000;

interface UnannouncedFlip {
  token: string;
  change: Partial<SwitchState>;
  at: number;
}

export interface FlipResult {
  state: SwitchState;
  mirrored: boolean;
}

export class Switches {
  /** What the database has said, with this worker's own flips folded in when they were made. */
  private base: SwitchState = { kv: true, timersSchedule: true, timersFire: true };
  /** Flips in force here whose announcement has not arrived yet, oldest first. */
  private unannounced: UnannouncedFlip[] = [];
  /** base with the unannounced flips on top: what every call reads. */
  private state: SwitchState = { ...this.base };
  private readonly tokenPrefix = `${randomBytes(6).toString('hex')}:${process.pid}:`;
  private flips = 0;
  private reading: Promise<void> | undefined;
  private readAgain = false;
  private announcementsHeard = 0;
  private listener: Client | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly onIpc = (msg: unknown) => {
    if (isSwitchMessage(msg) && msg.from !== process.pid) this.flipHere(msg.change, msg.token, 'cluster');
  };

  constructor(
    private readonly pool: Pool,
    private readonly databaseUrl: string | undefined,
    private readonly log: Logger,
    private readonly metrics: Metrics,
  ) {
    this.publishGauges();
  }

  /** The hot path: a property read. */
  get kv(): boolean {
    return this.state.kv;
  }
  get timersSchedule(): boolean {
    return this.state.timersSchedule;
  }
  get timersFire(): boolean {
    return this.state.timersFire;
  }
  snapshot(): SwitchState {
    return { ...this.state };
  }

  /** Reads the rows once and starts listening; called before the worker takes traffic. */
  async start(): Promise<void> {
    if (cluster.isWorker) process.on('message', this.onIpc);
    await this.reload().catch((err) => this.log.warn({ err: String(err) }, 'switches: could not read queen.system_state at boot; all on'));
    await this.listen();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (cluster.isWorker) process.off('message', this.onIpc);
    clearTimeout(this.reconnectTimer);
    const client = this.listener;
    this.listener = undefined;
    await client?.end().catch(() => undefined);
  }

  /** The operator's flip: here, then the siblings, then the rows. */
  async flip(change: Partial<SwitchState>): Promise<FlipResult> {
    const token = this.tokenPrefix + ++this.flips;
    this.flipHere(change, token, 'operator');
    if (cluster.isWorker && process.send) {
      const msg: SwitchMessage = { type: 'queen:switches', change, from: process.pid, token };
      process.send(msg);
    }
    const rows: Record<string, boolean> = {};
    for (const name of SWITCH_NAMES) if (change[name] !== undefined) rows[SWITCH_ROWS[name]] = change[name]!;
    if (Object.keys(rows).length === 0) {
      this.forget(token);
      return { state: this.snapshot(), mirrored: true };
    }
    try {
      await this.pool.query({ ...SWITCHES_WRITE, values: [JSON.stringify(rows), token] });
      return { state: this.snapshot(), mirrored: true };
    } catch (err) {
      // Never announced: stop waiting for it. The flip stays in force here (it is in base).
      this.forget(token);
      this.log.error({ err: String(err), change }, 'switches: the flip is in force here but queen.system_state was not written');
      return { state: this.snapshot(), mirrored: false };
    }
  }

  /** The rows as the database has them now (the GET's fresh read). */
  async readMirror(): Promise<SwitchState> {
    const { rows } = await this.pool.query<{ key: string; value: string }>(SWITCHES_READ);
    return stateFromRows(rows);
  }

  /**
   * Re-reads the rows and adopts them: what a boot, a reconnect or a foreign notification does.
   * One read at a time, and a read that an announcement overtook is read again, so an older
   * snapshot never lands after a newer one.
   */
  async reload(): Promise<void> {
    if (this.reading) {
      this.readAgain = true;
      return this.reading;
    }
    this.reading = (async () => {
      try {
        do {
          this.readAgain = false;
          const heard = this.announcementsHeard;
          const mirror = await this.readMirror();
          if (heard !== this.announcementsHeard) this.readAgain = true;
          else this.base = mirror;
          this.settle('database');
        } while (this.readAgain && !this.closed);
      } finally {
        this.reading = undefined;
      }
    })();
    return this.reading;
  }

  /** A flip made here or heard from a sibling: in force at once, and on top until announced. */
  private flipHere(change: Partial<SwitchState>, token: string, source: string): void {
    this.base = { ...this.base, ...defined(change) };
    this.unannounced.push({ token, change: defined(change), at: Date.now() });
    this.settle(source);
  }

  private forget(token: string): void {
    this.unannounced = this.unannounced.filter((f) => f.token !== token);
  }

  /** An announcement, in commit order: the database's word, and every flip up to it is now announced. */
  private heard(announcement: Announcement): void {
    this.announcementsHeard++;
    this.base = { ...this.base, ...announcement.change };
    const at = this.unannounced.findIndex((f) => f.token === announcement.token);
    if (at >= 0) this.unannounced.splice(0, at + 1);
    this.settle('database');
  }

  /** Recomputes the state from base and the unannounced flips; logs and publishes a change. */
  private settle(source: string): void {
    const now = Date.now();
    this.unannounced = this.unannounced.filter((f) => now - f.at < UNANNOUNCED_MS);
    const next = { ...this.base };
    for (const f of this.unannounced) Object.assign(next, f.change);
    if (SWITCH_NAMES.every((name) => next[name] === this.state[name])) return;
    this.state = next;
    this.publishGauges();
    this.log.warn({ switches: this.snapshot(), source }, 'switches: kv/timers state changed');
  }

  private publishGauges(): void {
    for (const name of SWITCH_NAMES) this.metrics.switchState.set({ switch: name }, this.state[name] ? 1 : 0);
  }

  private async listen(): Promise<void> {
    if (this.closed) return;
    const client = new Client({ connectionString: this.databaseUrl, application_name: 'queen-api-switches' });
    const retry = () => {
      if (this.closed || this.listener !== client) return;
      this.listener = undefined;
      client.end().catch(() => undefined);
      this.log.warn('switches: lost the queen_system_state listener; reconnecting in 1s');
      this.reconnectTimer = setTimeout(() => void this.listen(), 1000);
    };
    client.on('error', retry);
    client.on('end', retry);
    client.on('notification', (n) => {
      if (n.channel !== SWITCH_CHANNEL) return;
      const announcement = parseAnnouncement(n.payload);
      if (announcement) return this.heard(announcement);
      // Somebody wrote the rows by hand and said so: read them.
      this.reload().catch((err) => this.log.warn({ err: String(err) }, 'switches: re-read after a notification failed'));
    });
    this.listener = client;
    try {
      await client.connect();
      await client.query(LISTEN_SWITCHES);
      // A flip may have been announced while nobody listened (a reconnect): read the rows again.
      await this.reload();
    } catch (err) {
      this.log.warn({ err: String(err) }, 'switches: could not LISTEN on queen_system_state');
      retry();
    }
  }
}

/** The fields of a change that are set (an omitted field is left alone). */
function defined(change: Partial<SwitchState>): Partial<SwitchState> {
  const out: Partial<SwitchState> = {};
  for (const name of SWITCH_NAMES) if (typeof change[name] === 'boolean') out[name] = change[name];
  return out;
}
