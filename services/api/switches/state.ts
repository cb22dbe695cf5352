// What a kill switch is and how it is written down: the three switches, their queen.system_state
// rows, and the two ways the database tells a worker about them (the rows themselves, read at boot
// and after a reconnect, and the NOTIFY queen_system_state announcement a flip sends). Kept apart
// from the machinery (switches/board.ts, switches/relay.ts, switches/switches.ts) so that the one rule every reader
// must agree on, "only false is off; anything else, or no row, is on", is written once.
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

export const ALL_ON: SwitchState = { kv: true, timersSchedule: true, timersFire: true };

/** A row's value counts as off only when it is exactly jsonb false; anything else, or no row, is on. */
export function stateFromRows(rows: { key: string; value: string }[]): SwitchState {
  const off = new Set(rows.filter((r) => r.value.trim() === 'false').map((r) => r.key));
  return {
    kv: !off.has(SWITCH_ROWS.kv),
    timersSchedule: !off.has(SWITCH_ROWS.timersSchedule),
    timersFire: !off.has(SWITCH_ROWS.timersFire),
  };
}

/** The rows a flip writes (SWITCHES_WRITE's first parameter): one per switch the change sets. */
export function rowsOf(change: Partial<SwitchState>): Record<string, boolean> {
  const rows: Record<string, boolean> = {};
  for (const name of SWITCH_NAMES) if (change[name] !== undefined) rows[SWITCH_ROWS[name]] = change[name]!;
  return rows;
}

/** An announcement written by SWITCHES_WRITE: the flip's token and the rows it wrote. */
export interface Announcement {
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

/** The fields of a change that are set (an omitted field is left alone). */
export function defined(change: Partial<SwitchState>): Partial<SwitchState> {
  const out: Partial<SwitchState> = {};
  for (const name of SWITCH_NAMES) if (typeof change[name] === 'boolean') out[name] = change[name];
  return out;
}
