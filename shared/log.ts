// One pino logger per process. JSON lines, level from LOG_LEVEL; `process` names which one wrote.
import pino, { Logger } from 'pino';

export type { Logger };

/**
 * `sync` writes each line before the call returns: for a short-lived command whose last line is its
 * verdict (the release command). The default buffers, and a flush racing a write in flight put the
 * verdict before the line that preceded it, or lost it at exit.
 */
export function createLogger(processName: string, level = process.env.LOG_LEVEL ?? 'info', options: { sync?: boolean } = {}): Logger {
  const base = { level, base: { process: processName, pid: process.pid } };
  return options.sync ? pino(base, pino.destination({ dest: 1, sync: true })) : pino(base);
}
