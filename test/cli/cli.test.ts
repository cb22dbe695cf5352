// The queen-kv CLI (client/src/cli.ts) as an operator runs it: `node client/dist/cli.js ...` against a
// real cell with an admin token, its output piped (so JSON lines), its exit codes held to the
// documented ones: 0 done, 1 refused, 2 the command line, 3 unreachable.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { Queen } from '@queen-kv/client';
import { freePort } from '../../shared/embeddedPostgres';
import { useApi, UNLIMITED_RATES } from '../support/api';
import { REPO } from '../support/processes';

const CLI = path.join(REPO, 'client', 'dist', 'cli.js');
const TOKEN = 'cli-test-token';
const api = useApi({ QUEEN_ADMIN_TOKEN: TOKEN, ...UNLIMITED_RATES });

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout's JSON lines, parsed. */
  lines: any[];
}

function cli(args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH ?? '', QUEEN_URL: api.url, QUEEN_ADMIN_TOKEN: TOKEN, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      const lines = stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l));
      resolve({ code, stdout, stderr, lines });
    });
  });
}

test('--help lists every command and the exit codes; a command without its arguments is exit 2 with its usage; an unknown flag is exit 2', async () => {
  const h = await cli(['--help']);
  expect(h.code).toBe(0);
  for (const c of ['start', 'migrate', 'status', 'queues', 'messages', 'dlq', 'timers', 'kv', 'switch', 'tenants']) expect(h.stdout).toMatch(new RegExp(`^  ${c} `, 'm'));
  expect(h.stdout).toContain('Exit codes: 0 done, 1 the cell refused the call, 2 the command line was wrong, 3 the cell was unreachable');
  const sub = await cli(['timers', '--help']);
  expect(sub.code).toBe(0);
  expect(sub.stdout).toMatch(/^Usage: queen-kv timers list/);
  const missing = await cli(['kv', 'get']);
  expect(missing.code).toBe(2);
  expect(missing.stderr).toContain('Usage: queen-kv kv get NS KEY');
  expect((await cli(['kv', 'get', 'ns', 'k', '--bogus'])).code).toBe(2);
  expect((await cli(['nonsense'])).code).toBe(2);
  expect((await cli(['kv', 'put', 'ns', 'k', '{"a":1}'])).code).toBe(2); // no --ttl and no --forever
});

test('status and switches: JSON lines when piped; a switch turned off and on again is seen by a client', async () => {
  const status = await cli(['status']);
  expect(status.code).toBe(0);
  expect(status.lines).toHaveLength(1);
  expect(status.lines[0].switches).toEqual({ kv: true, timersSchedule: true, timersFire: true });
  const off = await cli(['switch', 'off', 'kv', '--operator', 'ada']);
  expect(off.code).toBe(0);
  expect(off.lines[0].kv).toBe(false);
  const queen = new Queen({ url: api.url, retry: false });
  try {
    await expect(queen.kv.get('ns', 'k')).rejects.toMatchObject({ code: 'kv_disabled' });
    expect((await cli(['switch', 'on', 'kv'])).code).toBe(0);
    expect((await queen.kv.get('ns', 'k')).found).toBe(false);
  } finally {
    await cli(['switch', 'on', 'kv']);
    await queen.close();
  }
});

test('kv put, get, prefix and del: the value only when one key is asked for', async () => {
  expect((await cli(['kv', 'put', 'orders', 'o-1', '{"state":"paid"}', '--ttl', '600'])).code).toBe(0);
  const got = await cli(['kv', 'get', 'orders', 'o-1']);
  expect(got.code).toBe(0);
  expect(JSON.stringify(got.lines[0])).toContain('"paid"');
  const listed = await cli(['kv', 'prefix', 'orders', 'o-']);
  expect(listed.code).toBe(0);
  expect(JSON.stringify(listed.lines[0])).toContain('o-1');
  expect(JSON.stringify(listed.lines[0])).not.toContain('paid');
  expect((await cli(['kv', 'del', 'orders', 'o-1'])).code).toBe(0);
  // Gone: the cell refuses (404), exit 1, and the JSON line names the code.
  const gone = await cli(['kv', 'get', 'orders', 'o-1']);
  expect(gone.code).toBe(1);
  expect(gone.lines[0]).toMatchObject({ error: 'operator_not_found', status: 404 });
});

test('a dead letter requeued from the CLI is delivered again; a timer cancelled from it never fires', async () => {
  const queen = new Queen({ url: api.url, retry: false });
  try {
    await queen.queue('cli-q').config({ retryLimit: 0 }).create();
    await queen.queue('cli-q').push([{ data: { n: 1 } }]);
    const [m] = await queen.queue('cli-q').group('g').pop();
    await queen.ack(m, false, { group: 'g' });
    const dead = await cli(['dlq', 'list', 'cli-q', '--group', 'g']);
    expect(dead.code).toBe(0);
    expect(JSON.stringify(dead.lines[0])).toContain(m.transactionId);
    const requeued = await cli(['dlq', 'requeue', m.partitionId, m.transactionId, '--group', 'g']);
    expect(requeued.code).toBe(0);
    const [again] = await queen.queue('cli-q').group('g').pop();
    expect(again.transactionId).toBe(m.transactionId);

    const t = await queen.timers.schedule({ queue: 'cli-q', data: { n: 2 }, delaySeconds: 3600 });
    const listed = await cli(['timers', 'list', '--queue', 'cli-q', '--state', 'pending']);
    expect(JSON.stringify(listed.lines[0])).toContain(t.timerId);
    expect((await cli(['timers', 'cancel', t.timerId])).code).toBe(0);
    expect((await queen.timers.peek(t.timerId)).found).toBe(false);
    // Idempotent: cancelled again, it says so and is still exit 0.
    expect((await cli(['timers', 'cancel', t.timerId])).code).toBe(0);
  } finally {
    await queen.close();
  }
});

test('a wrong token is refused (exit 1, unauthorized); a cell that is not there is exit 3', async () => {
  const wrong = await cli(['queues'], { QUEEN_ADMIN_TOKEN: 'not-it' });
  expect(wrong.code).toBe(1);
  expect(wrong.lines[0]).toMatchObject({ error: 'unauthorized', status: 401 });
  const nowhere = await cli(['status'], { QUEEN_URL: `http://127.0.0.1:${await freePort()}` });
  expect(nowhere.code).toBe(3);
  expect(nowhere.lines[0]).toMatchObject({ error: 'network_error', status: 0 });
});
