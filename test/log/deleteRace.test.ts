// A push, a pop or a timer's fire racing its queue's DELETE (the fuzzer's first finding:
// 500s breaking partitions_queue_id_fkey and partition_consumers_partition_id_fkey). No timing: in
// connection A the queue is deleted by the route's own statement and the transaction held open;
// the call under test is sent, and once its backend waits on a lock A commits. What each answers
// is what docs/log-and-transactions.md states: a push that met a delete comes after it (its queue
// and partition created anew, as for any unknown queue), a pop answers as the pop of a missing
// queue (204), a fire delivers into the queue created anew.
import { Client } from 'pg';
import { DEFAULT_TENANT } from '../../shared/config';
import { LOG_DELETE_QUEUE } from '../../shared/sql/log';
import { useApi } from '../support/api';
import { sql, untilWaitingOnLock } from '../support/database';
import { call } from '../support/http';
import { ack, pop, popRaw, push } from './helpers';

const api = useApi();

/** Connection A: DELETE /api/v1/resources/queues/:queue's statement, in a transaction left open. */
async function deleteHeld(queue: string): Promise<Client> {
  const a = new Client({ connectionString: api.databaseUrl });
  await a.connect();
  await a.query('BEGIN');
  const { rows } = await a.query({ text: LOG_DELETE_QUEUE.text, values: [DEFAULT_TENANT, queue] });
  expect(JSON.parse(rows[0].body)).toMatchObject({ deleted: true, existed: true });
  return a;
}

/** Sends `call` while A holds the delete; commits A once the call's backend waits on a lock. */
async function raceDelete<T>(queue: string, send: () => Promise<T>, applicationName = 'queen-api'): Promise<T> {
  const a = await deleteHeld(queue);
  try {
    const answer = send();
    // A rejection before the commit would otherwise go unobserved while we wait.
    answer.catch(() => undefined);
    await untilWaitingOnLock(api.databaseUrl, applicationName);
    await a.query('COMMIT');
    return await answer;
  } finally {
    await a.end();
  }
}

/** The queue's partitions and how many messages each holds now. */
async function contents(queue: string): Promise<Array<{ partition: string; messages: number }>> {
  return sql(api.databaseUrl, `
    SELECT p.name AS partition, (SELECT count(*)::int FROM queen.messages m WHERE m.partition_id = p.id) AS messages
      FROM queen.queues q JOIN queen.partitions p ON p.queue_id = q.id
     WHERE q.tenant_id = $1 AND q.name = $2 ORDER BY p.name`, [DEFAULT_TENANT, queue]);
}

test('push to a new partition of a queue deleted under it: queued, in the queue created anew (was 500 partitions_queue_id_fkey)', async () => {
  const first = await push(api.url, [{ queue: 'race-push', partition: 'old', payload: 1 }]);
  expect(first.status).toBe(201);
  const res = await raceDelete('race-push', () => push(api.url, [{ queue: 'race-push', partition: 'new', payload: 2 }]));
  expect(res.status).toBe(201);
  expect(res.body).toMatchObject([{ status: 'queued', queueName: 'race-push', partition: 'new' }]);
  // After the delete: the old partition went with it, the push's is there with its one message.
  expect(await contents('race-push')).toEqual([{ partition: 'new', messages: 1 }]);
  expect((await pop(api.url, 'race-push')).map((m) => m.data)).toEqual([2]);
});

test('a timer firing into a partition of a queue deleted under it: delivered into the queue created anew (the pass failed on a NULL last_seq)', async () => {
  await push(api.url, [{ queue: 'race-fire', partition: 'p', payload: 'before' }]);
  await sql(api.databaseUrl, `INSERT INTO queen.log_timers (tenant_id, queue, partition, payload, deliver_at, created_at)
                              VALUES ($1, 'race-fire', 'p', '"fired"', now() - interval '1 second', now())`, [DEFAULT_TENANT]);
  const b = new Client({ connectionString: api.databaseUrl, application_name: 'race-fire' });
  await b.connect();
  try {
    const { rows } = await raceDelete('race-fire', () => b.query(`SELECT queen.timers_fire_v1(100) AS r`), 'race-fire');
    expect(rows[0].r).toMatchObject({ fired: 1, duplicates: 0 });
  } finally {
    await b.end();
  }
  expect(await contents('race-fire')).toEqual([{ partition: 'p', messages: 1 }]);
  expect((await pop(api.url, 'race-fire')).map((m) => m.data)).toEqual(['fired']);
});

test('pop of a queue deleted under it, by a group new to it: 204 as for a missing queue (was 500 partition_consumers_partition_id_fkey)', async () => {
  await push(api.url, [{ queue: 'race-pop', partition: 'p', payload: 1 }]);
  const res = await raceDelete('race-pop', () => popRaw(api.url, 'race-pop', { consumerGroup: 'g' }));
  expect(res.status).toBe(204);
  expect(await contents('race-pop')).toEqual([]);
  const missing = await popRaw(api.url, 'race-pop-never-was', { consumerGroup: 'g' });
  expect(missing.status).toBe(204);
});

test('pop of a named partition of a queue deleted under it (queue mode, first pop): 204', async () => {
  await push(api.url, [{ queue: 'race-pop-part', partition: 'p', payload: 1 }]);
  const res = await raceDelete('race-pop-part', () => popRaw(api.url, 'race-pop-part', { partition: 'p' }));
  expect(res.status).toBe(204);
});

test('pop with subscriptionMode=new of a queue deleted under it: 204 (the subscription\'s rows broke the foreign key)', async () => {
  await push(api.url, [{ queue: 'race-sub-new', partition: 'p', payload: 1 }]);
  const res = await raceDelete('race-sub-new', () =>
    call(api.url, 'GET', '/api/v1/pop/queue/race-sub-new?consumerGroup=g&subscriptionMode=new'));
  expect(res.status).toBe(204);
});

test('pop with subscriptionFrom=<instant> of a queue deleted under it: 204', async () => {
  await push(api.url, [{ queue: 'race-sub-from', partition: 'p', payload: 1 }]);
  const from = encodeURIComponent(new Date(Date.now() - 60_000).toISOString());
  const res = await raceDelete('race-sub-from', () =>
    call(api.url, 'GET', `/api/v1/pop/queue/race-sub-from?consumerGroup=g&subscriptionFrom=${from}`));
  expect(res.status).toBe(204);
});

/** A connection of its own, named so untilWaitingOnLock can tell it apart. */
async function connection(applicationName: string): Promise<Client> {
  const c = new Client({ connectionString: api.databaseUrl, application_name: applicationName });
  await c.connect();
  return c;
}

test('a delete meeting a pop\'s lease whose ack then records a failure: both answer, no deadlock (the delete held the partition waiting on the cursor row, the ack\'s foreign-key check wanted the partition)', async () => {
  // The group's cursor row exists before the race (a pop that creates it holds its partition FOR
  // KEY SHARE, and the delete would wait there, before the messages).
  await push(api.url, [{ queue: 'race-ack', partition: 'p', payload: 0, transactionId: 'm0' }]);
  const [m0] = await pop(api.url, 'race-ack', { consumerGroup: 'g' });
  expect((await ack(api.url, m0)).body).toMatchObject({ success: true });
  await push(api.url, [{ queue: 'race-ack', partition: 'p', payload: 1, transactionId: 'm1' }]);
  const b = await connection('race-ack-b');
  const a = await connection('race-ack-a');
  try {
    await b.query('BEGIN');
    const { rows } = await b.query(`SELECT queen.log_pop_v2($1::uuid, 'race-ack', NULL, 'g', 1) AS r`, [DEFAULT_TENANT]);
    const m = rows[0].r[0];
    expect(m).toMatchObject({ transactionId: 'm1' });
    const deleted = a.query({ text: LOG_DELETE_QUEUE.text, values: [DEFAULT_TENANT, 'race-ack'] });
    deleted.catch(() => undefined);
    await untilWaitingOnLock(api.databaseUrl, 'race-ack-a');
    const ack = { transactionId: m.transactionId, partitionId: m.partitionId, status: 'failed', consumerGroup: 'g', leaseId: m.leaseId };
    const acked = await b.query(`SELECT queen.log_ack_batch_v2($1::uuid, jsonb_build_array($2::jsonb), false) -> 0 AS r`, [DEFAULT_TENANT, JSON.stringify(ack)]);
    expect(acked.rows[0].r).toMatchObject({ success: true });
    await b.query('COMMIT');
    expect(JSON.parse((await deleted).rows[0].body)).toMatchObject({ deleted: true, existed: true });
  } finally {
    await Promise.all([a.end(), b.end()]);
  }
  expect(await contents('race-ack')).toEqual([]);
});

test('a push to two partitions of a queue, one new, meeting the queue\'s delete between them: both answer, no deadlock', async () => {
  await push(api.url, [{ queue: 'race-two', partition: 'p1', payload: 1 }]);
  // A pause between the push's two partitions, in this suite's database only: creating partition
  // p2 waits on an advisory lock the test holds. The push then holds p1's lock.
  await sql(api.databaseUrl, `
    CREATE FUNCTION public.race_pause() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_advisory_xact_lock(28028); RETURN NEW; END $$`);
  await sql(api.databaseUrl, `CREATE TRIGGER race_pause BEFORE INSERT ON queen.partitions FOR EACH ROW WHEN (NEW.name = 'p2') EXECUTE FUNCTION public.race_pause()`);
  const gate = await connection('race-two-gate');
  const b = await connection('race-two-b');
  const a = await connection('race-two-a');
  try {
    await gate.query('BEGIN');
    await gate.query('SELECT pg_advisory_xact_lock(28028)');
    const items = [{ queue: 'race-two', partition: 'p1', payload: 2 }, { queue: 'race-two', partition: 'p2', payload: 3 }];
    const pushed = b.query(`SELECT queen.log_push_request_v2($1::uuid, $2::jsonb) AS r`, [DEFAULT_TENANT, JSON.stringify(items)]);
    pushed.catch(() => undefined);
    await untilWaitingOnLock(api.databaseUrl, 'race-two-b');
    const deleted = a.query({ text: LOG_DELETE_QUEUE.text, values: [DEFAULT_TENANT, 'race-two'] });
    deleted.catch(() => undefined);
    await untilWaitingOnLock(api.databaseUrl, 'race-two-a');
    await gate.query('COMMIT');
    expect((await pushed).rows[0].r).toMatchObject([{ status: 'queued' }, { status: 'queued' }]);
    expect(JSON.parse((await deleted).rows[0].body)).toMatchObject({ deleted: true, existed: true });
  } finally {
    await Promise.all([a.end(), b.end(), gate.end()]);
    await sql(api.databaseUrl, `DROP TRIGGER race_pause ON queen.partitions; DROP FUNCTION public.race_pause()`);
  }
  expect(await contents('race-two')).toEqual([]);
});
