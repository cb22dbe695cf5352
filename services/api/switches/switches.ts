// The runtime kill switches (docs/operations.md), as the rest of the API sees them. Read on every
// call, so the state is a plain in-process object and reading it costs nothing. A flip lands in
// three places, in this order, because an operator pulling a lever during an incident must not wait
// on a database that may be the thing going wrong:
//   1. this worker, at once;
//   2. every sibling worker, through the cluster primary (switches/relay.ts; the row waits, at most a
//      second, until the primary has handed the flip back, i.e. to everyone);
//   3. the queen.system_state rows, written and announced with NOTIFY queen_system_state, so that
//      other cells, restarted workers and the sweeper follow. `mirrored` says whether this worked.
// Each worker LISTENs on queen_system_state with one dedicated client (shared/listener.ts), reads the
// rows at boot and on a reconnect, and applies each announcement's rows as it arrives. An absent row
// means on. This module wires those sources together; switches/board.ts decides what is in force when
// they disagree, switches/state.ts reads and writes the rows.
import { randomBytes } from 'node:crypto';
import type { Pool } from 'pg';
import { CHANNEL, Listener } from '../../../shared/listener';
import type { Logger } from '../../../shared/log';
import type { ApiMetrics } from '../../../shared/metrics';
import { SWITCHES_READ, SWITCHES_WRITE } from '../../../shared/sql/system';
import { SwitchBoard } from './board';
import { WorkerRelay } from './relay';
import { parseAnnouncement, rowsOf, stateFromRows, SWITCH_NAMES, SwitchState } from './state';

export interface FlipResult {
  state: SwitchState;
  mirrored: boolean;
}

export class Switches {
  private readonly board: SwitchBoard;
  private readonly relay: WorkerRelay;
  private readonly listener: Listener;
  private readonly tokenPrefix = `${randomBytes(6).toString('hex')}:${process.pid}:`;
  private flips = 0;
  private reading: Promise<void> | undefined;
  private readAgain = false;
  private closed = false;

  constructor(
    private readonly pool: Pool,
    databaseUrl: string | undefined,
    private readonly log: Logger,
    private readonly metrics: ApiMetrics,
  ) {
    this.board = new SwitchBoard((state, source) => {
      this.publishGauges();
      this.log.warn({ switches: { ...state }, source }, 'switches: kv/timers state changed');
    });
    this.publishGauges();
    this.relay = new WorkerRelay({
      sibling: (change, token) => this.board.flip(change, token, 'cluster'),
      unmirrored: (change, token) => {
        // Never announced: stop waiting for it; the pin takes over.
        this.board.forget(token);
        this.board.pin(change, token, 'cluster');
      },
      replay: (change) => this.board.pin(change, undefined, 'cluster'),
    });
    this.listener = new Listener({
      connectionString: databaseUrl,
      applicationName: 'queen-api-switches',
      channels: [CHANNEL.systemState],
      name: 'switches',
      log,
      onNotification: (_channel, payload) => {
        const announcement = parseAnnouncement(payload);
        if (announcement) return this.board.heard(announcement);
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
    return this.board.state.kv;
  }
  get timersSchedule(): boolean {
    return this.board.state.timersSchedule;
  }
  get timersFire(): boolean {
    return this.board.state.timersFire;
  }
  snapshot(): SwitchState {
    return { ...this.board.state };
  }

  /** Reads the rows once and starts listening; called before the worker takes traffic. */
  async start(): Promise<void> {
    // A worker forked after a flip that could not be mirrored (a replaced worker) has the cell's pins before it serves.
    const pins = this.relay.start();
    await this.reload().catch((err) => this.log.warn({ err: String(err) }, 'switches: could not read queen.system_state at boot; all on'));
    await pins;
    await this.listener.start();
  }

  async close(): Promise<void> {
    this.closed = true;
    this.relay.close();
    this.board.close();
    await this.listener.close();
  }

  /** The operator's flip: here, then the siblings, then the rows. */
  async flip(change: Partial<SwitchState>): Promise<FlipResult> {
    const token = this.tokenPrefix + ++this.flips;
    this.board.flip(change, token, 'operator');
    // The row is written once every worker has the flip, so that when the operator is answered the siblings have it too.
    await this.relay.relay(change, token);
    const rows = rowsOf(change);
    if (Object.keys(rows).length === 0) {
      this.board.forget(token);
      return { state: this.snapshot(), mirrored: true };
    }
    try {
      await this.pool.query({ ...SWITCHES_WRITE, values: [JSON.stringify(rows), token] });
      return { state: this.snapshot(), mirrored: true };
    } catch (err) {
      // Never announced: stop waiting for it. The flip stays in force on this cell, pinned over
      // every later read of the rows (a reconnect's re-read must not undo it), here and in the siblings.
      this.board.forget(token);
      this.board.pin(change, token, 'operator');
      this.relay.relayUnmirrored(change, token);
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
          const mark = this.board.readStarted();
          if (!this.board.adopt(await this.readMirror(), mark)) this.readAgain = true;
        } while (this.readAgain && !this.closed);
      } finally {
        this.reading = undefined;
      }
    })();
    return this.reading;
  }

  private publishGauges(): void {
    const state = this.board.state;
    for (const name of SWITCH_NAMES) this.metrics.switchState.set({ switch: name }, state[name] ? 1 : 0);
  }
}
