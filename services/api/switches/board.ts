// What one worker holds to be in force, and why. Three sources disagree for a while after every flip,
// and this is the state machine that merges them, with no I/O of its own (switches/switches.ts feeds it):
//
//   base         what the database has said (rows read, announcements heard), with this worker's
//                own flips folded in when they were made;
//   unannounced  flips in force here whose announcement has not arrived yet, kept on top of base;
//   pinned       flips whose row could not be written, on top of everything.
//
// Why a flip stays on top until announced: announcements reach the listener later than the flip's own
// answer, so the announcement of an older flip (off) can arrive after a newer one (on) is already in
// force here. Until a worker has heard the announcement of a flip it applied itself (or heard from a
// sibling), that flip is kept on top of whatever the database says; announcements come in commit
// order, so once its own has arrived, the database's order is the order.
//
// Why a flip is pinned: one whose row could not be written (`mirrored: false`, typically because the
// database is the thing going wrong) stays in force on this cell, on top of every later read of the
// rows, until an operator flips that switch again here or the cell restarts ("in force on this
// broker but will not survive a restart"). Without the pin, the re-read that follows the listener's
// reconnect, once the database was back, silently undid a pause taken during the outage.
import { Announcement, ALL_ON, defined, SWITCH_NAMES, SwitchName, SwitchState } from './state';

/**
 * How long a flip stays on top while its announcement has not arrived: a listener that was
 * reconnecting when the flip committed never hears it (the reconnect's re-read has it instead).
 * Also how long an announced token is remembered, for a sibling's IPC that arrives after it.
 */
const UNANNOUNCED_MS = 10_000;

interface UnannouncedFlip {
  token: string;
  change: Partial<SwitchState>;
  at: number;
}

export class SwitchBoard {
  private base: SwitchState = { ...ALL_ON };
  /** Oldest first. */
  private unannounced: UnannouncedFlip[] = [];
  private pinned: Partial<SwitchState> = {};
  /** The token of the latest flip of each switch made here or heard from a sibling. */
  private latestFlip: Partial<Record<SwitchName, string>> = {};
  /** base with the unannounced flips, then the pinned ones, on top: what every call reads. */
  private current: SwitchState = { ...this.base };
  private announcementsHeard = 0;
  /** Tokens of the announcements heard lately, and when (see UNANNOUNCED_MS). */
  private readonly announced = new Map<string, number>();
  private expiryTimer: NodeJS.Timeout | undefined;
  private closed = false;

  /** `changed` is told every change of the state in force, and what caused it. */
  constructor(private readonly changed: (state: SwitchState, source: string) => void) {}

  get state(): SwitchState {
    return this.current;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.expiryTimer);
  }

  /** A flip made here or heard from a sibling: in force at once, and on top until announced. */
  flip(change: Partial<SwitchState>, token: string, source: string): void {
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

  /**
   * Pins the flip `token` (unmirrored): each of its switches whose latest flip it still is, so the
   * failure of an older flip's write, arriving after a newer flip, pins nothing. No token: the
   * primary's replay at boot, pinned as given.
   */
  pin(change: Partial<SwitchState>, token: string | undefined, source: string): void {
    for (const [name, value] of Object.entries(defined(change)) as [SwitchName, boolean][]) {
      if (token === undefined || this.latestFlip[name] === token) this.pinned[name] = value;
    }
    this.settle(source);
  }

  /** Stops waiting for the announcement of flip `token`: it will never come (nothing was written). */
  forget(token: string): void {
    this.unannounced = this.unannounced.filter((f) => f.token !== token);
  }

  /** An announcement, in commit order: the database's word, and every flip up to it is now announced. */
  heard(announcement: Announcement): void {
    this.announcementsHeard++;
    const now = Date.now();
    for (const [token, at] of this.announced) if (now - at >= UNANNOUNCED_MS) this.announced.delete(token);
    this.announced.set(announcement.token, now);
    this.base = { ...this.base, ...announcement.change };
    const at = this.unannounced.findIndex((f) => f.token === announcement.token);
    if (at >= 0) this.unannounced.splice(0, at + 1);
    this.settle('database');
  }

  /** Marks the start of a read of the rows; hand the mark to adopt() with what the read returned. */
  readStarted(): number {
    return this.announcementsHeard;
  }

  /**
   * Adopts the rows as read, unless an announcement arrived while they were read (the read may be
   * older than it): false then, and the caller reads again.
   */
  adopt(rows: SwitchState, mark: number): boolean {
    const current = mark === this.announcementsHeard;
    if (current) this.base = rows;
    this.settle('database');
    return current;
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

  /** Recomputes the state from base, the unannounced flips and the pins; tells a change. */
  private settle(source: string): void {
    const now = Date.now();
    this.unannounced = this.unannounced.filter((f) => now - f.at < UNANNOUNCED_MS);
    const next = { ...this.base };
    for (const f of this.unannounced) Object.assign(next, f.change);
    Object.assign(next, this.pinned);
    if (SWITCH_NAMES.every((name) => next[name] === this.current[name])) return;
    this.current = next;
    this.changed(next, source);
  }
}
