// The one way a test waits: for an observable condition, bounded, failing with a sentence that names
// what it waited for. A test that sleeps instead guesses how fast the machine is.

export interface WaitOptions {
  /** What the condition means, for the failure: "the sweeper's config line", "no timer pending". */
  what: string;
  /** The bound (default 15 s). */
  timeoutMs?: number;
  /** How often to look again (default 50 ms). */
  everyMs?: number;
}

/** Resolves once `condition` answers true; rejects after `timeoutMs` with `what` in the message. */
export async function waitFor(condition: () => boolean | Promise<boolean>, o: WaitOptions): Promise<void> {
  const timeoutMs = o.timeoutMs ?? 15_000;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`waited ${timeoutMs} ms for ${o.what}; it did not happen`);
    await new Promise((r) => setTimeout(r, o.everyMs ?? 50));
  }
}

/** A pause for a test that is about time passing (a lease or a TTL must run out): say why where it is used. */
export function elapse(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
