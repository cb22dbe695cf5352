// A small managed database, as docs/deploy.md describes it, played by a PostgreSQL of this test's
// own with ssl=on, a self-signed certificate (a CA Node does not know) and max_connections 20.
// TLS: pg 8 treats sslmode=require as verify-full, so the release command refuses the certificate
// at once; no-verify (in the URL or as PGSSLMODE) connects encrypted; verify-full with the
// certificate as sslrootcert connects. Pool sizing: the defaults are refused with the documented
// arithmetic (182 needed, 17 allowed) and the documented small-plan settings boot.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client } from 'pg';
import { EmbeddedPostgres, freePort, startEmbeddedPostgres } from '../../shared/embeddedPostgres';
import { API_MAIN, runMigrate, spawnLogged } from '../support/processes';


let dir: string;
let pg: EmbeddedPostgres | undefined;
let cert: string;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-tls-'));
  // The server (run as `postgres` when we are root) must reach the folder and own its key.
  fs.chmodSync(dir, 0o755);
  cert = path.join(dir, 'server.crt');
  const key = path.join(dir, 'server.key');
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'],
    { stdio: 'pipe', timeout: 30_000 },
  );
  fs.chmodSync(key, 0o600);
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    fs.chownSync(key, uid, gid);
  }
  pg = await startEmbeddedPostgres({
    dataDir: path.join(dir, 'data'),
    port: await freePort(),
    throwaway: true,
    settings: { ssl: 'on', ssl_cert_file: cert, ssl_key_file: key, fsync: 'off', max_connections: '20' },
  });
}, 120_000);

afterAll(async () => {
  await pg?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** The migrate process on `url`; `last` is its last line, the one that says how it ended. */
async function migrate(url: string, env: Record<string, string> = {}) {
  const run = await runMigrate({ DATABASE_URL: url, QUEEN_DB_BOOT_WAIT_MS: '30000', ...env });
  return { ...run, last: run.lines[run.lines.length - 1] ?? { msg: run.output } };
}

/** Whether a session opened with this URL is encrypted, as the server sees it. */
async function encrypted(url: string): Promise<boolean> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query('SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()');
    return rows[0].ssl;
  } finally {
    await client.end();
  }
}

test('sslmode=require verifies the certificate: an unknown CA is refused at once, with a line naming the database', async () => {
  const run = await migrate(`${pg!.url}?sslmode=require`);
  expect(run.code).toBe(1);
  expect(run.last.database).toBe(`127.0.0.1:${pg!.port}/postgres`);
  expect(run.last.msg).toMatch(/self[- ]signed certificate/);
  // Not taken for a database that is not up yet: waiting cannot fix a certificate.
  expect(run.output).not.toContain('database not reachable yet');
});

test('sslmode=no-verify, in the URL or as PGSSLMODE, connects encrypted without checking the certificate', async () => {
  expect((await migrate(`${pg!.url}?sslmode=no-verify`)).code).toBe(0);
  expect((await migrate(pg!.url, { PGSSLMODE: 'no-verify' })).code).toBe(0);
  expect(await encrypted(`${pg!.url}?sslmode=no-verify`)).toBe(true);
  // Without either, pg never tries TLS.
  expect(await encrypted(pg!.url)).toBe(false);
});

test('sslmode=verify-full with the CA as sslrootcert connects', async () => {
  const url = `${pg!.url}?sslmode=verify-full&sslrootcert=${encodeURIComponent(cert)}`;
  expect((await migrate(url)).code).toBe(0);
  expect(await encrypted(url)).toBe(true);
});

test('pool sizing on 20 connections: the defaults are refused with the arithmetic, the small-plan settings boot', async () => {
  const url = `${pg!.url}?sslmode=no-verify`;
  const refused = spawnLogged(process.execPath, [API_MAIN], { DATABASE_URL: url, QUEEN_WORKERS: '1', PORT: '0', LOG_LEVEL: 'info' });
  expect((await refused.exited).code).toBe(1);
  const line = refused.lines[refused.lines.length - 1];
  expect(line.level).toBe(60);
  expect(line.msg).toContain('DB_POOL_SIZE: the pools need 182 connections but the server allows 17 (max_connections 20 less 3 reserved)');

  const port = await freePort();
  const small = spawnLogged(process.execPath, [API_MAIN], {
    DATABASE_URL: url,
    WEB_CONCURRENCY: '1',
    DB_POOL_SIZE: '6',
    QUEEN_KV_POOL_SIZE: '2',
    PORT: String(port),
    LOG_LEVEL: 'info',
  });
  try {
    const config = await small.waitForLine((l) => l.msg === 'config: kv_timers', 'the API config line', 60_000);
    expect(config).toMatchObject({ workers: 1, messagePoolPerWorker: 6, kvPoolPerWorker: 2 });
    await small.waitForLine((l) => l.msg === 'API worker listening', 'API worker listening', 60_000);
  } finally {
    small.child.kill('SIGTERM');
    await small.exited;
  }
});
