// A bounded load: at most `count` calls, `concurrency` at a time, each recorded with the moment it
// started (an index into the sequence) and how it ended. Bounded in count by construction and in
// time by `stopWhen`.
export interface Outcome<T> {
  index: number;
  startedAt: number;
  ok?: T;
  error?: string;
}

export async function runLoad<T>(opts: {
  count: number;
  concurrency: number;
  call: (index: number) => Promise<T>;
  /** Checked before each start; once true, no new call starts. */
  stopWhen?: () => boolean;
  /** Called after each completion (e.g. to trigger a kill after the first N). */
  onDone?: (o: Outcome<T>, completed: number) => void;
}): Promise<Outcome<T>[]> {
  const outcomes: Outcome<T>[] = [];
  let next = 0;
  let completed = 0;
  const lane = async () => {
    while (next < opts.count && !opts.stopWhen?.()) {
      const index = next++;
      const o: Outcome<T> = { index, startedAt: Date.now() };
      outcomes.push(o);
      try {
        o.ok = await opts.call(index);
      } catch (err) {
        o.error = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      }
      completed++;
      opts.onDone?.(o, completed);
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, lane));
  return outcomes.sort((a, b) => a.index - b.index);
}
