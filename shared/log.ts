// One pino logger per process. JSON lines, level from LOG_LEVEL; `process` names which one wrote.
import pino, { Logger } from 'pino';

export type { Logger };

export function createLogger(processName: string, level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({ level, base: { process: processName, pid: process.pid } });
}
