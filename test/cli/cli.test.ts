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

/** A client of the test's cell, closed after `fn` whatever its outcome. */
async function withQueen(fn: (queen: Queen) => Promise<void>): Promise<void> {
  const queen = new Queen({ url: api.url, retry: false });
  try {
    await fn(queen);
  } finally {
    await queen.close();
  }
}

function cli(args: string[], env: Record<string, string> = {}, cwd = REPO): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', QUEEN_URL: api.url, QUEEN_ADMIN_TOKEN: TOKEN, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
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
  await withQueen(async (queen) => {
    try {
      await expect(queen.kv.get('ns', 'k')).rejects.toMatchObject({ code: 'kv_disabled' });
      expect((await cli(['switch', 'on', 'kv'])).code).toBe(0);
      expect((await queen.kv.get('ns', 'k')).found).toBe(false);
    } finally {
      await cli(['switch', 'on', 'kv']);
    }
  });
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

test('a dead letter requeued from the CLI is delivered again; a timer cancelled from it never fires', () =>
  withQueen(async (queen) => {
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
  }),
);

test('a wrong token is refused (exit 1, unauthorized); a cell that is not there is exit 3', async () => {
  const wrong = await cli(['queues'], { QUEEN_ADMIN_TOKEN: 'not-it' });
  expect(wrong.code).toBe(1);
  expect(wrong.lines[0]).toMatchObject({ error: 'unauthorized', status: 401 });
  const nowhere = await cli(['status'], { QUEEN_URL: `http://127.0.0.1:${await freePort()}` });
  expect(nowhere.code).toBe(3);
  expect(nowhere.lines[0]).toMatchObject({ error: 'network_error', status: 0 });
});

test('the reads and the rest of the actions: queues, partitions, messages (a page and one), skip, tenants, timers peek and reschedule, dlq discard --all', () =>
  withQueen(async (queen) => {
    await queen.queue('cli-r').config({ retryLimit: 0 }).create();
    await queen.queue('cli-r').partition('p1').push([{ data: { n: 1 } }, { data: { n: 2 } }]);
    const queues = await cli(['queues']);
    expect(queues.code).toBe(0);
    expect(JSON.stringify(queues.lines[0])).toContain('cli-r');
    const partitions = await cli(['partitions', 'cli-r']);
    expect(JSON.stringify(partitions.lines[0])).toContain('p1');
    const page = await cli(['messages', 'cli-r', 'p1', '--order', 'oldest', '--limit', '1']);
    expect(page.code).toBe(0);
    expect(page.lines[0].messages).toHaveLength(1);
    const [m] = await queen.queue('cli-r').partition('p1').group('g').pop();
    const one = await cli(['messages', '--id', m.partitionId, m.transactionId]);
    expect(one.lines[0].data).toEqual({ n: 1 });
    await queen.ack(m, false, { group: 'g' });
    const discarded = await cli(['dlq', 'discard', '--all', 'cli-r', '--group', 'g']);
    expect(discarded.code).toBe(0);
    expect(discarded.lines[0]).toMatchObject({ discarded: 1, remaining: 0 });
    // Skip: the group's backlog (message 2) counts as finished; what is pushed after comes next.
    expect((await cli(['skip', 'cli-r', 'g'])).code).toBe(0);
    await queen.queue('cli-r').partition('p1').push([{ data: { n: 3 } }]);
    const [next] = await queen.queue('cli-r').partition('p1').group('g').pop();
    expect(next.data).toEqual({ n: 3 });
    expect((await cli(['tenants'])).code).toBe(0);

    const t = await queen.timers.schedule({ queue: 'cli-r', data: { n: 4 }, delaySeconds: 3600 });
    const peeked = await cli(['timers', 'peek', t.timerId]);
    expect(peeked.lines[0]).toMatchObject({ found: true });
    const moved = await cli(['timers', 'reschedule', t.timerId, '--in', '7200']);
    expect(moved.code).toBe(0);
    const after = await queen.timers.peek(t.timerId);
    expect(after.found && new Date(after.timer.deliverAt).getTime() - Date.now()).toBeGreaterThan(3_700_000);
    expect((await cli(['timers', 'reschedule', t.timerId])).code).toBe(2); // neither --at nor --in
  }),
);

test('start and migrate run the checkout\'s own processes: start -- --help prints the cell\'s usage and boots nothing; migrate applies the schema (exit 0 on an applied one); outside a checkout both are exit 2', async () => {
  const help = await cli(['start', '--', '--help']);
  expect(help.code).toBe(0);
  expect(help.stdout).toMatch(/^Usage: npm start/m);
  const migrate = await cli(['migrate'], { DATABASE_URL: api.databaseUrl });
  expect(migrate.code).toBe(0);
  const elsewhere = await cli(['migrate'], { DATABASE_URL: api.databaseUrl }, '/');
  expect(elsewhere.code).toBe(2);
  expect(elsewhere.stderr).toContain('inside a checkout of Queen KV');
});
