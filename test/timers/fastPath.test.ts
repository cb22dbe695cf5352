// queen.timers_apply_v1 takes a shortcut for one plainly valid schedule (no timerKey, delaySeconds);
// timers_check_op_v1 and timers_when_v1 stay the one definition of every rule. This suite holds the
// two paths to the same outcome: every operation below runs with the shortcut off
// (queen.timers_fast_path = off) and on, inside one transaction (so now() is the same instant and
// deliverAt must agree to the millisecond), each run rolled back to a savepoint. What a caller sees
// (the answer with the drawn timerId set aside, or the refusal's SQLSTATE, detail and message) and the
// rows written (all but the drawn id) must be identical. The operations sit on both sides of every
// edge of the shortcut's guard.
import { useDatabase } from '../support/database';

const TENANT = '00000000-0000-0000-0000-000000000001';

const db = useDatabase({ client: true });

beforeAll(async () => {
  await db.client.query(
    `INSERT INTO queen.log_timers (tenant_id, timer_key, queue, payload, deliver_at, created_at)
     VALUES ($1, 'taken', 'orders', '{"a": 1}', '2030-01-01T00:00:00Z', '2026-01-01T00:00:00Z')`,
    [TENANT],
  );
});

type Outcome = { answer: unknown; rows: unknown } | { error: { code?: string; message: string; detail?: string } };

async function run(opsText: string, fast: boolean, settings: Record<string, string>): Promise<Outcome> {
  await db.client.query('SAVEPOINT probe');
  try {
    await db.client.query(`SELECT set_config('queen.timers_fast_path', $1, true)`, [fast ? 'on' : 'off']);
    for (const [name, value] of Object.entries(settings)) {
      await db.client.query(`SELECT set_config($1, $2, true)`, [name, value]);
    }
    const answer = (await db.client.query(`SELECT queen.timers_apply_v1($1::uuid, $2::jsonb)::text AS a`, [TENANT, opsText])).rows[0].a as string;
    const rows = (await db.client.query(
      `SELECT coalesce(jsonb_agg(to_jsonb(t) - 'timer_id' - 'shard' ORDER BY t.timer_key, t.queue, t.payload::text), '[]')::text AS r
       FROM queen.log_timers t WHERE t.created_at = now()`,
    )).rows[0].r as string;
    const ids = (await db.client.query(`SELECT coalesce(jsonb_agg(timer_id), '[]')::text AS i FROM queen.log_timers WHERE created_at = now()`)).rows[0].i as string;
    const drawn = new Set(JSON.parse(ids) as string[]);
    // A created timer's id is drawn anew by each run: it must be the row's id, and is then set aside.
    const parsed = JSON.parse(answer, (k, v) => (k === 'timerId' && drawn.has(v) ? 'drawn' : v));
    return { answer: parsed, rows: JSON.parse(rows) };
  } catch (err) {
    const e = err as { code?: string; message: string; detail?: string };
    return { error: { code: e.code, message: e.message, detail: e.detail } };
  } finally {
    await db.client.query('ROLLBACK TO SAVEPOINT probe');
  }
}

/** Both runs of `opsText` (the shortcut off, then on) inside one transaction, rolled back: one now() for both. */
async function bothWays(opsText: string, settings: Record<string, string> = {}): Promise<{ off: Outcome; on: Outcome }> {
  await db.client.query('BEGIN');
  try {
    return { off: await run(opsText, false, settings), on: await run(opsText, true, settings) };
  } finally {
    await db.client.query('ROLLBACK');
  }
}

const big = 'x'.repeat(65534); // "x...x" is 65536 bytes of jsonb text
const name128 = 'q'.repeat(128);

const single: Array<[string, unknown]> = [
  ['plain delay', { op: 'schedule', queue: 'orders', payload: { n: 1 }, delaySeconds: 3600 }],
  ['delay 0', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 0 }],
  ['fractional delay', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 1.2345678 }],
  ['tiny delay', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 0.0000001 }],
  ['delay at the horizon', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 31536000 }],
  ['delay just past the horizon', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 31536000.001 }],
  ['negative delay', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: -1 }],
  ['delay as a string', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: '10' }],
  ['delay null', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: null }],
  ['delay and deliverAt', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 1, deliverAt: '2030-01-01T00:00:00Z' }],
  ['deliverAt only', { op: 'schedule', queue: 'orders', payload: 1, deliverAt: '2026-12-01T00:00:00.5+02:00' }],
  ['deliverAt not a date', { op: 'schedule', queue: 'orders', payload: 1, deliverAt: '2027-02-30T00:00:00Z' }],
  ['deliverAt beyond the horizon', { op: 'schedule', queue: 'orders', payload: 1, deliverAt: '2999-01-01T00:00:00Z' }],
  ['no when', { op: 'schedule', queue: 'orders', payload: 1 }],
  ['partition', { op: 'schedule', queue: 'orders', partition: 'p:1-a.b', payload: 1, delaySeconds: 5 }],
  ['partition null', { op: 'schedule', queue: 'orders', partition: null, payload: 1, delaySeconds: 5 }],
  ['partition empty', { op: 'schedule', queue: 'orders', partition: '', payload: 1, delaySeconds: 5 }],
  ['partition a number', { op: 'schedule', queue: 'orders', partition: 7, payload: 1, delaySeconds: 5 }],
  ['partition starts with a dot', { op: 'schedule', queue: 'orders', partition: '.p', payload: 1, delaySeconds: 5 }],
  ['queue of 128', { op: 'schedule', queue: name128, payload: 1, delaySeconds: 5 }],
  ['queue of 129', { op: 'schedule', queue: `${name128}q`, payload: 1, delaySeconds: 5 }],
  ['queue starts with a dash', { op: 'schedule', queue: '-q', payload: 1, delaySeconds: 5 }],
  ['queue with a space', { op: 'schedule', queue: 'a b', payload: 1, delaySeconds: 5 }],
  ['queue missing', { op: 'schedule', payload: 1, delaySeconds: 5 }],
  ['queue a number', { op: 'schedule', queue: 5, payload: 1, delaySeconds: 5 }],
  ['payload missing', { op: 'schedule', queue: 'orders', delaySeconds: 5 }],
  ['payload null', { op: 'schedule', queue: 'orders', payload: null, delaySeconds: 5 }],
  ['payload at the limit', { op: 'schedule', queue: 'orders', payload: big, delaySeconds: 5 }],
  ['payload over the limit', { op: 'schedule', queue: 'orders', payload: `${big}x`, delaySeconds: 5 }],
  ['timerKey null', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 5, timerKey: null }],
  ['timerKey new', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 5, timerKey: 'fresh' }],
  ['timerKey repeated', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 5, timerKey: 'taken' }],
  ['timerKey empty', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 5, timerKey: '' }],
  ['timerKey a number', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 5, timerKey: 5 }],
  ['unknown field', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 5, extra: true }],
  ['op capitalised', { op: 'Schedule', queue: 'orders', payload: 1, delaySeconds: 5 }],
  ['op missing', { queue: 'orders', payload: 1, delaySeconds: 5 }],
  ['op a number', { op: 1, queue: 'orders', payload: 1, delaySeconds: 5 }],
  ['cancel', { op: 'cancel', timerId: '00000000-0000-0000-0000-00000000000a' }],
  ['reschedule', { op: 'reschedule', timerId: '00000000-0000-0000-0000-00000000000a', delaySeconds: 5 }],
  ['a number', 5],
  ['a string', 'schedule'],
  ['null', null],
  ['an array', [{ op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 5 }]],
];

describe('timers fast path: one operation', () => {
  test.each(single)('%s: same outcome with the shortcut on and off', async (_name, op) => {
    const { off, on } = await bothWays(JSON.stringify([op]));
    expect(on).toEqual(off);
  });

  test('numbers in the payload are kept as written on both paths', async () => {
    const { off, on } = await bothWays('[{"op": "schedule", "queue": "orders", "payload": {"n": 12345678901234567890.1234567890, "e": 1e400}, "delaySeconds": 1e2}]');
    expect(on).toEqual(off);
    expect(JSON.stringify(on)).toContain('"created":true');
  });
});

describe('timers fast path: settings and batches', () => {
  const cases: Array<[string, unknown, Record<string, string>]> = [
    ['delay at a lowered horizon', [{ op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 10 }], { 'queen.timers_max_horizon_seconds': '10' }],
    ['delay past a lowered horizon', [{ op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 10.5 }], { 'queen.timers_max_horizon_seconds': '10' }],
    ['payload at a lowered limit', [{ op: 'schedule', queue: 'orders', payload: 'abcdefgh', delaySeconds: 1 }], { 'queen.timers_max_payload_bytes': '10' }],
    ['payload past a lowered limit', [{ op: 'schedule', queue: 'orders', payload: 'abcdefghi', delaySeconds: 1 }], { 'queen.timers_max_payload_bytes': '10' }],
    ['two schedules', [{ op: 'schedule', queue: 'a', payload: 1, delaySeconds: 1 }, { op: 'schedule', queue: 'b', payload: 2, delaySeconds: 2 }], {}],
    ['empty batch', [], {}],
    ['not an array', { op: 'schedule', queue: 'orders', payload: 1, delaySeconds: 5 }, {}],
  ];
  test.each(cases)('%s: same outcome with the shortcut on and off', async (_name, ops, settings) => {
    const { off, on } = await bothWays(JSON.stringify(ops), settings);
    expect(on).toEqual(off);
  });
});

test('the plain schedule is answered and stored as the general path does', async () => {
  await db.client.query('BEGIN');
  try {
    const text = JSON.stringify([{ op: 'schedule', queue: 'orders', payload: { n: 1 }, delaySeconds: 3600 }]);
    const on = await run(text, true, {});
    expect(on).toMatchObject({
      answer: [{ index: 0, op: 'schedule', timerId: 'drawn', created: true }],
      rows: [{ queue: 'orders', partition: 'Default', payload: { n: 1 }, timer_key: null }],
    });
  } finally {
    await db.client.query('ROLLBACK');
  }
});
