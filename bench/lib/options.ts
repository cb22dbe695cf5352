// A benchmark's numeric options: `--name=N` on the command line, else the environment variable,
// else the default; anything but a positive number stops the run with a line naming the flag.
export function positiveOption(name: string, envName: string, fallback: number, argv: string[] = process.argv.slice(2)): number {
  const flag = argv.find((a) => a.startsWith(`--${name}=`));
  const n = Number(flag ? flag.slice(name.length + 3) : (process.env[envName] ?? fallback));
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} (${envName}) must be a positive number`);
  return n;
}

/** The middle value (the upper one of an even count). */
export function median(xs: number[]): number {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
}

/** A whole number from the environment variable `name`, else `fallback`; anything else stops the run naming the variable. */
export function wholeEnv(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new Error(`${name} must be a whole number, got ${JSON.stringify(raw)}`);
  return Number(raw);
}

/**
 * Positive numbers from the environment: `prefix + key` for each key of `defaults`, else its default
 * (unset or empty); anything else stops the run naming the variable. One table says each knob once.
 */
export function positiveEnvs<K extends string>(prefix: string, defaults: Record<K, number>): Record<K, number> {
  const read = ([key, fallback]: [string, number]): [string, number] => {
    const raw = process.env[prefix + key];
    const n = raw === undefined || raw === '' ? fallback : Number(raw);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`${prefix + key} must be a number above 0, got ${JSON.stringify(raw)}.`);
    return [key, n];
  };
  return Object.fromEntries(Object.entries<number>(defaults).map(read)) as Record<K, number>;
}
