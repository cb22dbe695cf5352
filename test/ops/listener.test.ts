// The one LISTEN connection every long-lived listener of the cell uses (shared/listener.ts): it
// hears notifications, survives its connection being killed (and says what it may have missed),
// never throws when the database is unreachable, and stops retrying once closed.
import { Writable } from 'node:stream';
import pino from 'pino';
import { freePort } from '../../shared/embeddedPostgres';
import { CHANNEL, Listener } from '../../shared/listener';
import { createTestDatabase, sql } from '../support/database';
import { waitFor } from '../support/wait';

let db: { url: string; drop(): Promise<void> };
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

function capture() {
  const lines: Array<{ level: number; msg: string }> = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { lines, log: pino({ level: 'debug' }, stream) };
}

test('a killed LISTEN connection comes back, reports that it may have missed something, and hears again', async () => {
  const { lines, log } = capture();
  const heard: string[] = [];
  const listens: boolean[] = [];
  const listener = new Listener({
    connectionString: db.url,
    applicationName: 'queen-test-listener',
    channels: [CHANNEL.log],
    name: 'test',
    log,
    onNotification: (_channel, payload) => heard.push(String(payload)),
    onListening: (afterLoss) => void listens.push(afterLoss),
  });
  try {
    await listener.start();
    expect(listener.listening).toBe(true);
    expect(listens).toEqual([false]);
    await sql(db.url, `SELECT pg_notify('${CHANNEL.log}', 'before')`);
    await waitFor(() => heard.includes('before'), { what: 'the notification sent before the kill heard', everyMs: 25 });

    await sql(db.url, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'queen-test-listener' AND datname = current_database()`);
    await waitFor(() => listens.length === 2, { what: 'the second LISTEN (the reconnect)', everyMs: 25 });
    expect(listens).toEqual([false, true]);
    expect(lines.filter((l) => l.msg === 'test: LISTEN connection lost; reconnecting')).toHaveLength(1);
    expect(lines.some((l) => l.msg === 'test: LISTEN restored')).toBe(true);

    await sql(db.url, `SELECT pg_notify('${CHANNEL.log}', 'after')`);
    await waitFor(() => heard.includes('after'), { what: 'the notification sent after the reconnect heard', everyMs: 25 });
  } finally {
    await listener.close();
  }
});

test('an unreachable database: start() resolves without listening, warns once, and close() ends the retries', async () => {
  const { lines, log } = capture();
  const url = new URL(db.url);
  url.port = String(await freePort());
  const listener = new Listener({ connectionString: url.toString(), applicationName: 'queen-test-listener', channels: [CHANNEL.log], name: 'test', log, onNotification: () => undefined });
  await listener.start();
  expect(listener.listening).toBe(false);
  // A second call while a retry is pending keeps the retry's schedule instead of hammering the server.
  await listener.start();
  await waitFor(() => lines.length >= 1, { what: 'a log line', everyMs: 25 });
  await listener.close();
  const warnings = lines.filter((l) => l.msg === 'test: LISTEN connection lost; reconnecting');
  expect(warnings).toHaveLength(1);
  expect(warnings[0].level).toBe(40);
});
