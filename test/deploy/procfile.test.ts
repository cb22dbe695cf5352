// The Procfile as Heroku-style platforms run it, through node-foreman's `nf start web=1,sweeper=1`:
// both process lines against one database, the API answering on $PORT, then stopped by the runner's PID.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../../shared/embeddedPostgres';
import { createSweeperMetrics } from '../../shared/metrics';
import { createTestDatabase } from '../support/database';
import { request } from '../support/http';
import { checkExposition } from '../support/metrics';
import { LogLine, NF, REPO, Spawned, spawnLogged, untilGone } from '../support/processes';

let db: { url: string; drop(): Promise<void> };
let nf: Spawned;
let envDir: string;

afterAll(async () => {
  // Only on a failure above: the whole group nf leads, by its PID.
  if (nf && nf.child.exitCode === null && nf.child.signalCode === null) {
    process.kill(-nf.child.pid!, 'SIGKILL');
    await nf.exited;
  }
  if (envDir) fs.rmSync(envDir, { recursive: true, force: true });
  if (db) await db.drop();
});

test('the Procfile lists the release command, web and sweeper on the built output', () => {
  const lines = fs.readFileSync(path.join(REPO, 'Procfile'), 'utf8').trim().split('\n');
  expect(lines).toEqual(['release: node dist/services/migrate.js', 'web: node dist/services/api/main.js', 'sweeper: node dist/services/sweeper/main.js']);
});

test('nf start runs both lines against DATABASE_URL; the API answers on PORT; SIGINT to nf stops everything', async () => {
  db = await createTestDatabase();
  const port = await freePort();
  const sweeperMetricsPort = await freePort();
  // The environment an operator writes into .env (or the platform's config vars).
  envDir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-procfile-'));
  const envFile = path.join(envDir, '.env');
  fs.writeFileSync(
    envFile,
    [`DATABASE_URL=${db.url}`, 'QUEEN_WORKERS=2', 'DB_POOL_SIZE=8', `QUEEN_SWEEPER_METRICS_PORT=${sweeperMetricsPort}`, 'LOG_LEVEL=info', ''].join('\n'),
  );
  // nf gives the first process named PORT=-p and the next PORT+100; the sweeper does not use PORT.
  // `release` is Heroku's phase, not a process: nf would run it as one (and take PORT for it), so
  // the processes are named, as docs/deploy.md tells a Procfile user to.
  nf = spawnLogged(NF, ['start', '-j', 'Procfile', '-e', envFile, '-p', String(port), '--raw', 'web=1,sweeper=1'], { HOME: envDir }, { group: true });

  const workers = await Promise.all([0, 1].map((i) => nf.waitForLine((l) => l.msg === 'API worker listening' && nf.lines.filter((x) => x.msg === 'API worker listening').length > i, `worker ${i + 1} listening`)));
  const sweeperConfig = await nf.waitForLine((l) => l.msg === 'config: sweeper', 'the sweeper config line');
  const kvConfig = await nf.waitForLine((l) => l.msg === 'config: kv_timers', 'the API config line');
  expect(kvConfig).toMatchObject({ workers: 2 });
  expect(workers.every((w) => w.port === port)).toBe(true);

  const put = await request(port, 'PUT', '/api/v1/kv/procfile/hello', { body: { value: { from: 'nf' }, ttlSeconds: 60 } });
  expect(put.status).toBe(200);
  const get = await request(port, 'GET', '/api/v1/kv/procfile/hello');
  expect(get.status).toBe(200);
  expect(JSON.parse(get.text)).toMatchObject({ found: true, value: { from: 'nf' } });
  expect((await request(port, 'GET', '/ready')).status).toBe(200);
  checkExposition((await request(port, 'GET', '/metrics')).text);

  // The sweeper's own endpoint, when the sweeper runs any phase.
  if ((sweeperConfig.phases as string[]).length > 0) {
    const scraped = await request(sweeperMetricsPort, 'GET', '/metrics');
    expect(scraped.status).toBe(200);
    const families = checkExposition(scraped.text);
    for (const m of createSweeperMetrics().register.getMetricsAsArray()) expect(families.has(m.name)).toBe(true);
  }

  const pids = [nf.lines.find((l) => l.msg === 'config: kv_timers')!.pid!, sweeperConfig.pid!, ...workers.map((w) => w.pid!)];
  // ^C in the terminal that runs nf: SIGINT to its process group (PID of nf = group id). node-foreman
  // forwards signals only to the `sh -c` it wraps each line in, which does not pass them on, so a
  // signal to nf's PID alone would leave the node processes running.
  process.kill(-nf.child.pid!, 'SIGINT');
  const exit = await nf.exited;
  expect(exit.signal === null || exit.signal === 'SIGINT').toBe(true);
  for (const pid of pids) await untilGone(pid);
  expect(nf.lines.some((l: LogLine) => l.msg === 'stopped' && l.process === 'api')).toBe(true);
});
