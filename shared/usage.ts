// `npm start -- --help` and `node dist/services/api/main.js --help`: what the start does and the
// variables a first run is likely to want, printed before anything boots.
import { DEFAULTS, portsFromPort } from './config';

export function usage(env: Record<string, string | undefined> = process.env): string {
  const port = Number(env.PORT?.trim() || DEFAULTS.port);
  const derived = Number.isInteger(port) ? portsFromPort(port) : portsFromPort(DEFAULTS.port);
  const show = (p: number) => (p === 0 ? 'a free port, logged' : String(p));
  return [
    'Usage: npm start [-- --help]',
    '       node dist/services/api/main.js [--help]     (the Procfile\'s web, after npm run build)',
    '',
    'Without DATABASE_URL: an embedded PostgreSQL (data in QUEEN_DATA_DIR, default .queen/pg), the',
    'schema, the API cluster and one sweeper. With DATABASE_URL: the API only; run the sweeper and',
    'the release command (npm run migrate) as their own processes (see the Procfile).',
    '',
    'Ports (each follows PORT unless its own variable is set):',
    `  PORT                        the API                          ${show(Number.isInteger(port) ? port : DEFAULTS.port)}`,
    `  QUEEN_SWEEPER_METRICS_PORT  the sweeper's /metrics, /health  PORT+1: ${show(derived.sweeperMetricsPort)}`,
    `  QUEEN_EMBEDDED_PG_PORT      the embedded PostgreSQL          PORT+7: ${show(derived.embeddedPgPort)} (127.0.0.1 only)`,
    '',
    'Stop with SIGTERM or Ctrl-C: the workers drain, the sweeper finishes its pass, then the',
    'embedded PostgreSQL stops (fast shutdown); the exit code is 0.',
    '',
    'Other variables: docs/configuration.md. Logs: JSON lines, pretty-printed when stdout is a terminal.',
    '',
  ].join('\n');
}
