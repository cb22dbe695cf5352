// Concurrent pushes of the largest legal body against one spawned API worker: its resident memory
// stays under the bound the README states (a worker's baseline plus the in-flight body budget times
// the memory one body costs), and so does every PostgreSQL backend serving it. The calls the budget
// has no room for are 503 server_busy; at least some are served.
import fs from 'node:fs';
import { Client } from 'pg';
import { DEFAULTS } from '../../shared/config';
import { freePort } from '../../shared/embeddedPostgres';
import { createTestDatabase } from '../support/database';
import { outcome, request } from '../support/http';
import { spawnApi, Spawned, untilHealthy } from '../support/processes';

const MIB = 1024 * 1024;
/** The bounds the README states for the defaults (QUEEN_MAX_BODY_BYTES 4 MiB, QUEEN_MAX_INFLIGHT_BODY_BYTES 16 MiB). */
const WORKER_RSS_BOUND = 240 * MIB;
const BACKEND_ANON_BOUND = 128 * MIB;
const CONCURRENT = 32;

/** A /proc/<pid>/status field in bytes (0 once the process is gone). */
function procBytes(pid: number, field: 'VmRSS' | 'RssAnon'): number {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

/**
 * One POST on a fresh connection. A refused push's connection is closed while its body is still
 * being sent: the client sees the 503, or, when its write fails first, EPIPE/ECONNRESET (status 0).
 */
const post = (port: number, path: string, body: Buffer) => outcome(request(port, 'POST', path, { body, timeoutMs: 60_000 }));

let db: { url: string; drop(): Promise<void> };
let api: Spawned | undefined;

afterAll(async () => {
  await api?.stop();
  await db?.drop();
});

test('32 concurrent pushes of the largest legal body, twice: the worker and its PostgreSQL backends stay under their stated bounds', async () => {
  db = await createTestDatabase();
  const port = await freePort();
  api = spawnApi({ DATABASE_URL: db.url, PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '20' });
  await untilHealthy(api, port);
  const worker = api.lines.find((l) => l.msg === 'API worker listening')!.pid as number;
  const watcher = new Client({ connectionString: db.url });
  await watcher.connect();
  const frame = Buffer.from(JSON.stringify({ items: [{ queue: 'big', payload: '' }] }));
  const body = (i: number) => {
    const text = JSON.stringify({ items: [{ queue: 'big', partition: `p${i}`, payload: 'x'.repeat(DEFAULTS.maxBodyBytes - frame.length - 64) }] });
    return Buffer.from(text);
  };
  const workerBaseline = procBytes(worker, 'VmRSS');
  let workerPeak = 0;
  let backendPeak = 0;
  let backends: number[] = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const { rows } = await watcher.query(`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'queen-api'`);
      backends = rows.map((r) => r.pid);
      for (let i = 0; i < 5; i++) {
        workerPeak = Math.max(workerPeak, procBytes(worker, 'VmRSS'));
        for (const pid of backends) backendPeak = Math.max(backendPeak, procBytes(pid, 'RssAnon'));
        await new Promise((r) => setTimeout(r, 10)); // the sampling period: a peak is looked for, not awaited
      }
    }
  })();
  const answers: { status: number; error?: string }[] = [];
  try {
    for (let round = 0; round < 2; round++) {
      answers.push(...(await Promise.all(Array.from({ length: CONCURRENT }, (_, i) => post(port, '/api/v1/push', body(i))))));
    }
  } finally {
    sampling = false;
    await sampler;
    await watcher.end();
  }
  console.log(JSON.stringify({ workerBaselineMiB: workerBaseline / MIB, workerPeakMiB: workerPeak / MIB, backendPeakMiB: backendPeak / MIB, answers: answers.map((a) => a.error ?? a.status) }));
  const refused = (a: { status: number; error?: string }) => (a.status === 503 && a.error === 'server_busy') || (a.status === 0 && ['EPIPE', 'ECONNRESET'].includes(a.error!));
  expect(answers.filter((a) => a.status !== 201 && !refused(a))).toEqual([]);
  expect(answers.some((a) => a.status === 201)).toBe(true);
  expect(workerPeak).toBeLessThan(WORKER_RSS_BOUND);
  expect(backendPeak).toBeLessThan(BACKEND_ANON_BOUND);
});
