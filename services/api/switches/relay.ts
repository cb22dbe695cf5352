// How a switch flip crosses the processes of one cell: worker -> cluster primary -> every worker,
// over cluster IPC, never through the database (an operator pulling a lever during an incident must
// not wait on a database that may be the thing going wrong). Both ends live here, the primary's
// relay (main.ts starts it once) and each worker's side of it (switches/switches.ts holds one), so the
// message format has one reader and one writer.
//
// The primary also keeps the cell's pins (flips whose row could not be written, switches/board.ts) and
// hands them to a worker that asks at boot, so a worker forked later (a replaced one) has them too.
import cluster from 'node:cluster';
import { SWITCH_NAMES, SwitchName, SwitchState } from './state';

/** The IPC message a worker sends the primary, and the primary sends every worker. */
export interface SwitchMessage {
  type: 'queen:switches';
  change: Partial<SwitchState>;
  from: number;
  token: string;
  /** The flip `token` could not be written to queen.system_state: pin it (switches/board.ts). */
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

/** How long a flip waits for the primary to relay it before it writes the row anyway. */
const RELAY_WAIT_MS = 1000;
/** How long a booting worker waits for the primary's pins, in case no primary relays switches. */
const PINS_WAIT_MS = 1000;

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

/** What a worker does with what its siblings and the primary send it. */
export interface RelayHandlers {
  /** A sibling's flip, relayed: in force at once. */
  sibling(change: Partial<SwitchState>, token: string): void;
  /** A sibling's flip whose row could not be written: it will never be announced; pin it. */
  unmirrored(change: Partial<SwitchState>, token: string): void;
  /** The primary's pins, answering this worker's question at boot. */
  replay(change: Partial<SwitchState>): void;
}

/**
 * A worker's side. Outside a cluster (a server started in-process) there is nobody to relay to and
 * every method returns at once.
 */
export class WorkerRelay {
  /** Flips sent to the primary, waiting for it to hand them back (it relays to every worker at once). */
  private readonly relaying = new Map<string, () => void>();
  private pinsArrived: (() => void) | undefined;
  private readonly inCluster = cluster.isWorker && process.send !== undefined;
  private readonly onIpc = (msg: unknown) => {
    if (!isSwitchMessage(msg)) return;
    if (msg.from === process.pid) return void this.relaying.get(msg.token)?.();
    if (msg.replay) {
      this.handlers.replay(msg.change);
      this.pinsArrived?.();
    } else if (msg.unmirrored) this.handlers.unmirrored(msg.change, msg.token);
    else this.handlers.sibling(msg.change, msg.token);
  };

  constructor(private readonly handlers: RelayHandlers) {}

  /**
   * Starts hearing the siblings and asks the primary for the cell's pins; resolves once they have
   * arrived (bounded). A worker forked after a flip that could not be mirrored needs them before it serves.
   */
  start(): Promise<void> {
    if (!this.inCluster) return Promise.resolve();
    process.on('message', this.onIpc);
    const pins = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, PINS_WAIT_MS);
      this.pinsArrived = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    process.send!({ type: 'queen:switches-pins' } satisfies PinsRequest);
    return pins.finally(() => {
      this.pinsArrived = undefined;
    });
  }

  close(): void {
    process.off('message', this.onIpc);
  }

  /**
   * Hands a flip to every sibling; resolves once the primary has handed it back (so every worker has
   * it, rather than whenever a loaded primary gets round to it), or after RELAY_WAIT_MS: a primary
   * that does not relay is not waited for.
   */
  async relay(change: Partial<SwitchState>, token: string): Promise<void> {
    if (!this.inCluster) return;
    const relayed = new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, RELAY_WAIT_MS);
      this.relaying.set(token, () => {
        clearTimeout(timer);
        resolve();
      });
    });
    process.send!({ type: 'queen:switches', change, from: process.pid, token } satisfies SwitchMessage);
    await relayed;
    this.relaying.delete(token);
  }

  /** Tells the siblings (and the primary, which keeps the cell's pins) that flip `token` was not written. */
  relayUnmirrored(change: Partial<SwitchState>, token: string): void {
    if (!this.inCluster) return;
    process.send!({ type: 'queen:switches', change, from: process.pid, token, unmirrored: true } satisfies SwitchMessage);
  }
}
