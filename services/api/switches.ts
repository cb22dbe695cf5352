// The runtime kill switches (SPEC section 4, seeds "KV and timers"). Read on every call, so the
// state is a plain in-process object and reading it costs nothing. A flip lands in three places,
// in this order, because an operator pulling a lever during an incident must not wait on a
// database that may be the thing going wrong:
//   1. this worker, at once;
//   2. every sibling worker, through the cluster primary (worker -> primary -> all workers, IPC);
//   3. the queen.system_state rows, written and announced with NOTIFY queen_system_state, so that
//      other cells, restarted workers and the sweeper follow. `mirrored` says whether this worked.
// Each worker LISTENs on queen_system_state with one dedicated client and re-reads the rows at boot
// and on every notification. An absent row means on.
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

export interface FlipResult {
  state: SwitchState;
  mirrored: boolean;
}

export class Switches {
  private state: SwitchState = { kv: true, timersSchedule: true, timersFire: true };
  private listener: Client | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly onIpc = (msg: unknown) => {
    if (isSwitchMessage(msg) && msg.from !== process.pid) this.apply(msg.change, 'cluster');
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
    this.apply(change, 'operator');
    if (cluster.isWorker && process.send) {
      const msg: SwitchMessage = { type: 'queen:switches', change, from: process.pid };
      process.send(msg);
    }
    const rows: Record<string, boolean> = {};
    for (const name of SWITCH_NAMES) if (change[name] !== undefined) rows[SWITCH_ROWS[name]] = change[name]!;
    if (Object.keys(rows).length === 0) return { state: this.snapshot(), mirrored: true };
    try {
      await this.pool.query({ ...SWITCHES_WRITE, values: [JSON.stringify(rows)] });
      return { state: this.snapshot(), mirrored: true };
    } catch (err) {
      this.log.error({ err: String(err), change }, 'switches: the flip is in force here but queen.system_state was not written');
      return { state: this.snapshot(), mirrored: false };
    }
  }

  /** The rows as the database has them now (the GET's fresh read). */
  async readMirror(): Promise<SwitchState> {
    const { rows } = await this.pool.query<{ key: string; value: string }>(SWITCHES_READ);
    return stateFromRows(rows);
  }

  /** Re-reads the rows and adopts them: what a notification, a boot or a reconnect does. */
  async reload(): Promise<void> {
    const mirror = await this.readMirror();
    this.apply(mirror, 'database');
  }

  private apply(change: Partial<SwitchState>, source: string): void {
    let changed = false;
    for (const name of SWITCH_NAMES) {
      const v = change[name];
      if (typeof v === 'boolean' && this.state[name] !== v) {
        this.state[name] = v;
        changed = true;
      }
    }
    if (!changed) return;
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
