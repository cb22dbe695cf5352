// A terminal gets pino-pretty's lines; a pipe and production get JSON (shared/log.ts). The processes
// run as an operator runs them: the release command and a sweeper under a pseudo-terminal (util-linux
// `script`, which gives the child a pty and copies what it writes to our pipe), and piped.
import { spawn } from 'node:child_process';
import { createTestDatabase } from '../support/database';
import { MIGRATE_MAIN, REPO, runMigrate, SWEEPER_MAIN } from '../support/processes';
import { waitFor } from '../support/wait';

let db: { url: string; drop(): Promise<void> };
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
// eslint-disable-next-line no-control-regex
const plain = (text: string) => text.replace(/\x1b\[[0-9;]*m/g, '').replace(/\r/g, '');
const lines = (text: string) => plain(text).split('\n').filter((l) => l.trim() !== '');
const isJson = (line: string) => {
  try {
    return typeof JSON.parse(line) === 'object';
  } catch {
    return false;
  }
};

interface OnTty {
  pid: number;
  output(): string;
  exited: Promise<number | null>;
  kill(): void;
}

/** `node script` on a pseudo-terminal with `env` (and PATH): `script -qec CMD /dev/null`. */
function onTty(main: string, env: Record<string, string>): OnTty {
  const child = spawn('script', ['-qec', `exec ${quote(process.execPath)} ${quote(main)}`, '/dev/null'], {
    cwd: REPO,
    env: { PATH: process.env.PATH ?? '', TERM: 'xterm', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  void exited.then(() => clearTimeout(timer));
  return { pid: child.pid!, output: () => out, exited, kill: () => child.kill('SIGKILL') };
}

const PRETTY = /^\[\d\d:\d\d:\d\d\.\d{3}\] (TRACE|DEBUG|INFO|WARN|ERROR|FATAL): (\S+)\[(\d+)\] (.*)$/;

test('on a terminal the release command writes pretty lines: time, level name, process[pid], message', async () => {
  const run = onTty(MIGRATE_MAIN, { DATABASE_URL: db.url, LOG_LEVEL: 'info' });
  expect(await run.exited).toBe(0);
  const out = lines(run.output());
  expect(out.filter(isJson)).toEqual([]);
  const verdict = out.map((l) => PRETTY.exec(l)).find((m) => m && m[4].startsWith('migrate: the schema is applied'));
  expect(verdict).toBeTruthy();
  expect(verdict![1]).toBe('INFO');
  expect(verdict![2]).toBe('migrate');
  // The fields go on lines of their own below the message, never the payload-free JSON blob.
  expect(out.some((l) => /^\s+database: "/.test(l))).toBe(true);
});

test('piped, the same command writes JSON lines', async () => {
  const run = await runMigrate({ DATABASE_URL: db.url });
  expect(run.code).toBe(0);
  const out = lines(run.output);
  expect(out.length).toBeGreaterThan(0);
  expect(out.filter((l) => !isJson(l))).toEqual([]);
  expect(run.lines.at(-1)).toMatchObject({ level: 30, process: 'migrate', msg: expect.stringContaining('migrate: the schema is applied') });
});

test('NODE_ENV=production writes JSON even on a terminal', async () => {
  const run = onTty(MIGRATE_MAIN, { DATABASE_URL: db.url, NODE_ENV: 'production' });
  expect(await run.exited).toBe(0);
  const out = lines(run.output());
  expect(out.length).toBeGreaterThan(0);
  expect(out.filter((l) => !isJson(l))).toEqual([]);
  expect(JSON.parse(out.at(-1)!)).toMatchObject({ level: 30, process: 'migrate' });
});

test('a long-running process (the sweeper, buffered logger) is pretty on a terminal too', async () => {
  const run = onTty(SWEEPER_MAIN, { DATABASE_URL: db.url, QUEEN_SWEEPER_METRICS_PORT: '0', LOG_LEVEL: 'info' });
  try {
    await waitFor(() => lines(run.output()).some((l) => / sweeper\[\d+\] config: sweeper$/.test(l)), { timeoutMs: 30_000, what: 'the sweeper config line' });
    const out = lines(run.output());
    expect(out.filter(isJson)).toEqual([]);
    const listening = out.map((l) => PRETTY.exec(l)).find((m) => m && m[4] === 'sweeper metrics listening');
    expect(listening).toBeTruthy();
    // Stopped as an operator would: SIGTERM to the node process (its pid is on the line), exit 0.
    process.kill(Number(listening![3]), 'SIGTERM');
    expect(await run.exited).toBe(0);
    expect(lines(run.output()).some((l) => / sweeper\[\d+\] stopped$/.test(l))).toBe(true);
  } finally {
    run.kill();
  }
});
