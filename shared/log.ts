// One pino logger per process; `process` names which one wrote, the level comes from LOG_LEVEL.
// JSON lines, one object a line, whenever stdout is not a terminal (a pipe, a file, a container's
// log) and always under NODE_ENV=production. A person at a terminal (stdout a TTY, NODE_ENV not
// production) gets pino-pretty's lines instead: local time, the level's name, `process[pid]`, the
// message, and the fields below it. pino-pretty is a development dependency: where it is not
// installed (the production image) the lines stay JSON.
import pino, { DestinationStream, Logger } from 'pino';

export type { Logger };

/** Whether this process writes pretty lines: stdout is a terminal and NODE_ENV is not production. */
export function wantsPrettyLogs(env: NodeJS.ProcessEnv = process.env, stdoutIsTty = process.stdout.isTTY === true): boolean {
  return stdoutIsTty && env.NODE_ENV !== 'production';
}

/** pino-pretty writing to stdout, or undefined where it is not installed. */
function prettyDestination(): DestinationStream | undefined {
  let pretty: typeof import('pino-pretty');
  try {
    // A runtime require: the production image has no development dependencies.
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    pretty = require('pino-pretty');
  } catch {
    return undefined;
  }
  // sync: each line is on the terminal when the call returns (a fatal line before an exit too).
  return pretty({
    destination: 1,
    sync: true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'process,pid,hostname',
    messageFormat: '{process}[{pid}] {msg}',
    singleLine: false,
  });
}

/**
 * `sync` writes each line before the call returns: for a short-lived command whose last line is its
 * verdict (the release command). The default buffers, and a flush racing a write in flight put the
 * verdict before the line that preceded it, or lost it at exit. (Pretty lines are always written
 * synchronously.)
 */
export function createLogger(processName: string, level = process.env.LOG_LEVEL ?? 'info', options: { sync?: boolean } = {}): Logger {
  const base = { level, base: { process: processName, pid: process.pid } };
  const pretty = wantsPrettyLogs() ? prettyDestination() : undefined;
  if (pretty) return pino(base, pretty);
  return options.sync ? pino(base, pino.destination({ dest: 1, sync: true })) : pino(base);
}
