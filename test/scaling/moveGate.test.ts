// The refusal of a tenant in a move that cannot be stale. Each API worker refuses a moving tenant
// before it reads a body, from its copy of queen.tenant_moves (read every second). A call that
// passed that check just before a pause and was then held longer than the move's fence (its body
// sent slowly, a queue for a connection) must still be refused, or it writes to a cell the move has
// already copied and will empty: an acknowledged write, lost. The database refuses it in the call's
// own transaction (queen.tenant_moving_v1). Here the held calls are real requests whose bodies arrive
// after the worker has read the pause; every statement a GET route sends is refused in SQL too.
import { KV_APPLY_ONE } from '../../shared/sql/kv';
import { LOG_DEAD_LETTERS, LOG_MESSAGE_TRACES, LOG_POP, LOG_POP_MATCH } from '../../shared/sql/log';
import { TIMERS_LIST, TIMERS_PEEK } from '../../shared/sql/timers';
import { useApi } from '../support/api';
import { call, head, rawExchange } from '../support/http';

const A = 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa';
const api = useApi({ QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1', QUEEN_ADMIN_TOKEN: 'gate-test', QUEEN_KV_REQUIRE_GRANT: '0' });
const as = { 'x-queen-tenant': A };
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Every route that takes a body, each with one that would write (or read) if it were let through. */
const HELD: Array<[string, string, unknown]> = [
  ['PUT', '/api/v1/kv/held/put', { value: 1, forever: true }],
  ['POST', '/api/v1/kv', { operations: [{ op: 'put', ns: 'held', key: 'batch', value: 1, forever: true }] }],
  ['POST', '/api/v1/push', { items: [{ queue: 'held', transactionId: 'push', payload: 1 }] }],
  ['POST', '/api/v1/transaction', { operations: [{ type: 'push', items: [{ queue: 'held', transactionId: 'bundle', payload: 1 }] }], kv: [{ op: 'put', ns: 'held', key: 'bundle', value: 1, forever: true }] }],
  ['POST', '/api/v1/timers', { queue: 'held', payload: 1, delaySeconds: 60, timerKey: 'held' }],
  ['POST', '/api/v1/configure', { queue: 'configured', options: { leaseTime: 30 } }],
  ['POST', '/api/v1/ack', { transactionId: 'seed', partitionId: A, status: 'completed' }],
  ['POST', '/api/v1/ack/batch', { acknowledgments: [{ transactionId: 'seed', partitionId: A, status: 'completed' }] }],
  ['POST', `/api/v1/lease/${A}/extend`, { seconds: 10 }],
  ['POST', '/api/v1/traces', { transactionId: 'seed', partitionId: A, data: {} }],
];

/** What the held calls would have written, counted. */
async function written(): Promise<{ kv: number; messages: number; timers: number; queues: number }> {
  const { rows: [r] } = await api.pool.query(
    `SELECT (SELECT count(*) FROM queen.kv WHERE tenant_id = $1 AND namespace = 'held')::int AS kv,
            (SELECT count(*) FROM queen.messages m JOIN queen.partitions p ON p.id = m.partition_id JOIN queen.queues q ON q.id = p.queue_id
              WHERE q.tenant_id = $1 AND q.name = 'held')::int AS messages,
            (SELECT count(*) FROM queen.log_timers WHERE tenant_id = $1)::int AS timers,
            (SELECT count(*) FROM queen.queues WHERE tenant_id = $1 AND name = 'configured')::int AS queues`,
    [A],
  );
  return r;
}

/** Until a fresh call is refused at the worker's door: the worker has read the pause. */
async function untilTheWorkerSeesIt(): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const res = await call(api.url, 'GET', '/api/v1/kv/held/any', undefined, as);
    if (res.status === 503) return;
    await sleep(50);
  }
  throw new Error('the worker never read the pause');
}

afterEach(() => api.pool.query('DELETE FROM queen.tenant_moves'));

test('a call let in before the pause and held past it is refused by the database: 503 tenant_moving, Retry-After: 1, nothing written', async () => {
  const port = Number(new URL(api.url).port);
  // Each call's head, and all of its body but the last byte, before the pause.
  const held = HELD.map(([method, path, body]) => {
    const text = JSON.stringify(body);
    const x = rawExchange(port, head(method, path, { ...as, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }));
    return { method, path, text, x };
  });
  for (const h of held) await h.x.send(h.text.slice(0, -1));
  await sleep(100);
  await api.pool.query(`INSERT INTO queen.tenant_moves (tenant_id, role, peer, step) VALUES ($1, 'source', 'cell-b', 'paused')`, [A]);
  await untilTheWorkerSeesIt();
  for (const h of held) await h.x.send(h.text.slice(-1));
  const answers = await Promise.all(held.map(async (h) => {
    const a = await h.x.answer;
    h.x.socket.destroy();
    return `${h.method} ${h.path}: ${a.status} ${a.body?.error} ${a.headers['retry-after']}`;
  }));
  expect(answers).toEqual(held.map((h) => `${h.method} ${h.path}: 503 tenant_moving 1`));
  expect(await written()).toEqual({ kv: 0, messages: 0, timers: 0, queues: 0 });

  // The same calls with no move in the way are served (so the refusal above is the move's).
  await api.pool.query('DELETE FROM queen.tenant_moves');
  for (let i = 0; i < 100 && (await call(api.url, 'GET', '/api/v1/kv/held/any', undefined, as)).status === 503; i++) await sleep(50);
  const served = await Promise.all(HELD.slice(0, 6).map(([method, path, body]) => call(api.url, method, path, body, as)));
  expect(served.map((s) => s.status)).toEqual([200, 200, 201, 200, 200, 200]);
  expect(await written()).toEqual({ kv: 3, messages: 2, timers: 1, queues: 1 });
});

test('every statement a reading route sends is refused in SQL while the tenant has a move row, with the role that names the message', async () => {
  const statements = [
    { ...KV_APPLY_ONE, values: [A, 'get', 'held', 'put', '{}'] },
    { ...LOG_POP, values: [A, 'held', null, null, 1, 1] },
    { ...LOG_POP_MATCH, values: [A, 'n', null, null, 1, 1, false] },
    { ...LOG_DEAD_LETTERS, values: [A, 'held', null, null, 10, 0, null, null] },
    { ...LOG_MESSAGE_TRACES, values: [A, A, 'seed'] },
    { ...TIMERS_PEEK, values: [A, A] },
    { ...TIMERS_LIST, values: [A, null, null, 10] },
  ];
  const outcomes = async () => Promise.all(statements.map((s) => api.pool.query(s).then(() => 'served', (e) => `${e.code} ${e.detail}`)));
  expect(await outcomes()).toEqual(statements.map(() => 'served'));
  for (const role of ['source', 'target', 'moved']) {
    await api.pool.query(`INSERT INTO queen.tenant_moves (tenant_id, role, peer, step) VALUES ($1, $2, 'cell-b', 'paused') ON CONFLICT (tenant_id) DO UPDATE SET role = EXCLUDED.role`, [A, role]);
    expect(await outcomes()).toEqual(statements.map(() => `QK400 {"code": "tenant_moving", "role": "${role}"}`));
  }
});
