// The runtime kill switches (docs/operations.md). Read on every call, so the
// state is a plain in-process object and reading it costs nothing. A flip lands in three places,
// in this order, because an operator pulling a lever during an incident must not wait on a
// database that may be the thing going wrong:
//   1. this worker, at once;
//   2. every sibling worker, through the cluster primary (worker -> primary -> all workers, IPC; the
//      row waits, at most a second, until the primary has handed the flip back, i.e. to everyone);
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
//
// A flip whose row could not be written (`mirrored: false`, typically because the database is the
// thing going wrong) is pinned: it stays in force on this cell, on top of every later read of the
// rows, until an operator flips that switch again here or the cell restarts ("in force on
// this broker but will not survive a restart"). Without the pin, the re-read that follows the
// listener's reconnect, once the database was back, silently undid a pause taken during the outage.
// The primary keeps the pins too, and hands them to a worker it forks later (a replaced worker).
import { randomBytes } from 'node:crypto';
import cluster from 'node:cluster';
import type { Pool } from 'pg';
import { CHANNEL, Listener } from '../../shared/listener';
import type { Logger } from '../../shared/log';
import type { Metrics } from '../../shared/metrics';
import { SWITCHES_READ, SWITCHES_WRITE } from '../../shared/sql/system';

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

/** The IPC message a worker sends the primary, and the primary sends every worker. */
export interface SwitchMessage {
  type: 'queen:switches';
  change: Partial<SwitchState>;
  from: number;
  token: string;
  /** The flip `token` could not be written to queen.system_state: pin it (see the top of this file). */
  unmirrored?: boolean;
  /** The primary's pins, handed to a worker that asked at boot: pinned whatever the worker's own flips. */
  replay?: boolean;
}

/** A worker's question at boot: which flips are pinned on this cell? */
interface PinsRequest {
  type: 'queen:switches-pins';
}

function isPinsRequest(msg: unknown): msg is PinsRequest {
  return typeof msg === 'object' && msg !== null && (msg as PinsRequest).type === 'queen:switches-pins';
}

export function isSwitchMessage(msg: unknown): msg is SwitchMessage {
  return typeof msg === 'object' && msg !== null && (msg as SwitchMessage).type === 'queen:switches';
}

/**
 * The primary's side, and all of it: relay a worker's flip to every worker (the sender included;
 * applying the same change twice is harmless). main.ts calls this once.
 */
export function relaySwitchesInPrimary(): void {
  // The cell's pins, kept as the workers keep theirs: the latest flip of each switch, pinned when its
  // row could not be written, unpinned by any later flip of that switch.
  const latest: Partial<Record<SwitchName, string>> = {};
  const pinned: Partial<SwitchState> = {};
  cluster.on('message', (from, msg) => {
    if (isPinsRequest(msg)) {
      const reply: SwitchMessage = { type: 'queen:switches', change: { ...pinned }, from: 0, token: 'primary', unmirrored: true, replay: true };
      if (from.isConnected()) from.send(reply);
      return;
    }
    if (!isSwitchMessage(msg)) return;
    for (const name of SWITCH_NAMES) {
      const value = msg.change[name];
      if (typeof value !== 'boolean') continue;
      if (!msg.unmirrored) {
        latest[name] = msg.token;
        delete pinned[name];
      } else if (latest[name] === msg.token) {
        pinned[name] = value;
      }
    }
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

/**
 * How long a flip stays on top while its announcement has not arrived: a listener that was
 * reconnecting when the flip committed never hears it (the reconnect's re-read has it instead).
 * Also how long an announced token is remembered, for a sibling's IPC that arrives after it.
 */
const UNANNOUNCED_MS = 10_000;

/** How long a flip waits for the primary to relay it before it writes the row anyway. */
const RELAY_WAIT_MS = 1000;

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
  /** Flips whose row could not be written: on top of everything until flipped again here (top of file). */
  private pinned: Partial<SwitchState> = {};
  /** The token of the latest flip of each switch made here or heard from a sibling. */
  private latestFlip: Partial<Record<SwitchName, string>> = {};
  private pinsArrived: (() => void) | undefined;
  /** base with the unannounced flips, then the pinned ones, on top: what every call reads. */
  private state: SwitchState = { ...this.base };
  private readonly tokenPrefix = `${randomBytes(6).toString('hex')}:${process.pid}:`;
  private flips = 0;
  private reading: Promise<void> | undefined;
  private readAgain = false;
  private announcementsHeard = 0;
  private readonly listener: Listener;
  private expiryTimer: NodeJS.Timeout | undefined;
  /** Tokens of the announcements heard lately, and when (see UNANNOUNCED_MS). */
  private readonly announced = new Map<string, number>();
  private closed = false;
  /** Flips sent to the primary, waiting for it to hand them back (it relays to every worker at once). */
  private readonly relaying = new Map<string, () => void>();
  private readonly onIpc = (msg: unknown) => {
    if (!isSwitchMessage(msg)) return;
    if (msg.from === process.pid) return void this.relaying.get(msg.token)?.();
    if (msg.replay) {
      this.pin(msg.change, undefined, 'cluster');
      this.pinsArrived?.();
    } else if (msg.unmirrored) {
      // Never announced: stop waiting for it; the pin takes over.
      this.forget(msg.token);
      this.pin(msg.change, msg.token, 'cluster');
    } else this.flipHere(msg.change, msg.token, 'cluster');
  };

  constructor(
    private readonly pool: Pool,
    databaseUrl: string | undefined,
    private readonly log: Logger,
    private readonly metrics: Metrics,
  ) {
    this.publishGauges();
    this.listener = new Listener({
      connectionString: databaseUrl,
      applicationName: 'queen-api-switches',
      channels: [CHANNEL.systemState],
      name: 'switches',
      log,
      onNotification: (_channel, payload) => {
        const announcement = parseAnnouncement(payload);
        if (announcement) return this.heard(announcement);
        // Somebody wrote the rows by hand and said so: read them.
        this.reload().catch((err) => this.log.warn({ err: String(err) }, 'switches: re-read after a notification failed'));
      },
      // A flip may have been announced while nobody listened (a reconnect): read the rows again.
      onListening: async (afterLoss) => {
        await this.reload();
        if (afterLoss) this.log.info({ switches: this.snapshot() }, 'switches: listening on queen_system_state again; rows re-read');
      },
    });
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
    let pins: Promise<void> = Promise.resolve();
    if (cluster.isWorker && process.send) {
      process.on('message', this.onIpc);
      // A worker forked after a flip that could not be mirrored (a replaced worker) asks the primary
      // for the cell's pins before it serves; bounded, in case no primary relays switches.
      pins = new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, 1000);
        this.pinsArrived = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      process.send({ type: 'queen:switches-pins' } satisfies PinsRequest);
    }
    await this.reload().catch((err) => this.log.warn({ err: String(err) }, 'switches: could not read queen.system_state at boot; all on'));
    await pins;
    this.pinsArrived = undefined;
    await this.listener.start();
  }

  async close(): Promise<void> {
    this.closed = true;
    if (cluster.isWorker) process.off('message', this.onIpc);
    clearTimeout(this.expiryTimer);
    await this.listener.close();
  }

  /** The operator's flip: here, then the siblings, then the rows. */
  async flip(change: Partial<SwitchState>): Promise<FlipResult> {
    const token = this.tokenPrefix + ++this.flips;
    this.flipHere(change, token, 'operator');
    if (cluster.isWorker && process.send) {
      const msg: SwitchMessage = { type: 'queen:switches', change, from: process.pid, token };
      // The row is written once the primary has handed the flip to every worker (its copy back to
      // us says so), so that when the operator is answered the siblings have it too, rather than
      // whenever a loaded primary gets round to it. Bounded: a primary that does not relay is not waited for.
      const relayed = new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, RELAY_WAIT_MS);
        this.relaying.set(token, () => {
          clearTimeout(timer);
          resolve();
        });
      });
      process.send(msg);
      await relayed;
      this.relaying.delete(token);
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
      // Never announced: stop waiting for it. The flip stays in force on this cell, pinned over
      // every later read of the rows (a reconnect's re-read must not undo it), here and in the siblings.
      this.forget(token);
      this.pin(change, token, 'operator');
      if (cluster.isWorker && process.send) {
        const msg: SwitchMessage = { type: 'queen:switches', change, from: process.pid, token, unmirrored: true };
        process.send(msg);
      }
      this.log.error(
        { err: String(err), change },
        'switches: the flip is in force on this cell but queen.system_state was not written; it holds until flipped again here or the cell restarts, and other cells do not see it',
      );
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
    for (const name of Object.keys(defined(change)) as SwitchName[]) {
      // A newer flip of a switch replaces its pin; whether it is pinned in turn is its own write's business.
      this.latestFlip[name] = token;
      delete this.pinned[name];
    }
    // A sibling's flip whose announcement came first (IPC through the primary can be slower than the
    // database): its change is in base already, in commit order, and newer announcements may have
    // followed it. Kept on top now, it would undo them.
    if (this.announced.has(token)) return;
    this.base = { ...this.base, ...defined(change) };
    this.unannounced.push({ token, change: defined(change), at: Date.now() });
    this.settle(source);
    this.expireLater();
  }

  /** Settles again once the oldest unannounced flip has waited its time (nothing else may come to). */
  private expireLater(): void {
    if (this.expiryTimer || this.unannounced.length === 0 || this.closed) return;
    const wait = Math.max(0, this.unannounced[0].at + UNANNOUNCED_MS - Date.now()) + 10;
    this.expiryTimer = setTimeout(() => {
      this.expiryTimer = undefined;
      this.settle('database');
      this.expireLater();
    }, wait);
    this.expiryTimer.unref();
  }

  /**
   * Pins the flip `token` (unmirrored): each of its switches whose latest flip it still is, so the
   * failure of an older flip's write, arriving after a newer flip, pins nothing. No token: the
   * primary's replay at boot, pinned as given.
   */
  private pin(change: Partial<SwitchState>, token: string | undefined, source: string): void {
    for (const [name, value] of Object.entries(defined(change)) as [SwitchName, boolean][]) {
      if (token === undefined || this.latestFlip[name] === token) this.pinned[name] = value;
    }
    this.settle(source);
  }

  private forget(token: string): void {
    this.unannounced = this.unannounced.filter((f) => f.token !== token);
  }

  /** An announcement, in commit order: the database's word, and every flip up to it is now announced. */
  private heard(announcement: Announcement): void {
    this.announcementsHeard++;
    const now = Date.now();
    for (const [token, at] of this.announced) if (now - at >= UNANNOUNCED_MS) this.announced.delete(token);
    this.announced.set(announcement.token, now);
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
    Object.assign(next, this.pinned);
    if (SWITCH_NAMES.every((name) => next[name] === this.state[name])) return;
    this.state = next;
    this.publishGauges();
    this.log.warn({ switches: this.snapshot(), source }, 'switches: kv/timers state changed');
  }

  private publishGauges(): void {
    for (const name of SWITCH_NAMES) this.metrics.switchState.set({ switch: name }, this.state[name] ? 1 : 0);
  }
}

/** The fields of a change that are set (an omitted field is left alone). */
function defined(change: Partial<SwitchState>): Partial<SwitchState> {
  const out: Partial<SwitchState> = {};
  for (const name of SWITCH_NAMES) if (typeof change[name] === 'boolean') out[name] = change[name];
  return out;
}
