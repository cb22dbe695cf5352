// The client as a user gets it: `npm pack` in a clean copy of client/ (no dist: prepack builds it),
// the tarball installed into a fresh project with no network (`npm install --offline <tarball>`:
// the package has no dependency to fetch), a README example run by node from that project against a
// real cell, and the same example type-checked against the installed types (found narrows value,
// data is what the caller says, Queen's own constructor options and close()).
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { strictProgram } from './typecheck';
import { useCell } from './helpers';

const cell = useCell();
const ROOT = path.resolve(__dirname, '..', '..', '..');
let work: string;
let tarball: string;
let files: string[];

beforeAll(() => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'queen-client-pack-'));
  // A clean tree: what git tracks of client/, nothing built, inside a checkout whose `npm ci` ran
  // (the build output folder, which git ignores): the compiler and @types/node are the root's, as
  // in a fresh clone, where npm puts every ancestor's node_modules/.bin on a script's path.
  const copy = path.join(ROOT, 'dist', 'pack-check', 'client');
  fs.rmSync(copy, { recursive: true, force: true });
  fs.mkdirSync(copy, { recursive: true });
  for (const name of ['package.json', 'README.md', 'tsconfig.json', 'src']) {
    fs.cpSync(path.join(ROOT, 'client', name), path.join(copy, name), { recursive: true });
  }
  const out = execFileSync('npm', ['pack', '--json', '--pack-destination', work], { cwd: copy, encoding: 'utf8' });
  const packed = JSON.parse(out.slice(out.indexOf('[')))[0];
  tarball = path.join(work, packed.filename);
  files = packed.files.map((f: { path: string }) => f.path);
  const project = path.join(work, 'project');
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'uses-queen-kv', version: '1.0.0', private: true }));
  execFileSync('npm', ['install', '--offline', '--no-audit', '--no-fund', tarball], { cwd: project, env: process.env, encoding: 'utf8' });
}, 120_000);
afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

test('the tarball from a clean tree holds the built entries, their types, and every source a map names', () => {
  for (const f of ['dist/index.js', 'dist/index.d.ts', 'dist/pg.js', 'dist/pg.d.ts', 'package.json', 'README.md']) expect(files).toContain(f);
  const maps = files.filter((f) => f.endsWith('.map'));
  expect(maps.length).toBeGreaterThan(0);
  const installed = path.join(work, 'project', 'node_modules', '@queen-kv', 'client');
  for (const map of maps) {
    const { sources } = JSON.parse(fs.readFileSync(path.join(installed, map), 'utf8')) as { sources: string[] };
    for (const source of sources) expect(files).toContain(path.posix.join(path.posix.dirname(map), source));
  }
});

const EXAMPLE = `
import { Queen, QueenError, type Message } from '@queen-kv/client'

type Order = { id: string; amount: number }

export async function main(url: string): Promise<string[]> {
  const said: string[] = []
  const queen = new Queen({ urls: [url], timeoutMillis: 10_000, retryAttempts: 2 })
  await queen.kv.put('orders', 'ord_8812', { state: 'paid' }, { ttlSeconds: 604800 })
  const got = await queen.kv.get<{ state: string }>('orders', 'ord_8812')
  if (got.found) said.push('state ' + got.value.state)
  const none = await queen.kv.get('orders', 'nope')
  if (!none.found) said.push('absent ' + String(none.value))
  await queen.queue('orders').push([{ data: { id: 'ord_8812', amount: 1200 } }])
  const [message] = await queen.queue('orders').group('billing').pop<Order>()
  said.push('amount ' + message.data.amount)
  const ack = await queen.ack(message, true, { group: 'billing' })
  said.push('acked ' + ack.success)
  // close() stops a consume loop waiting on an empty queue, and waits for it.
  const consuming = queen.queue('idle').group('g').consume(async (m: Message<Order>) => void said.push('consumed ' + m.data.id))
  await queen.close()
  said.push('consumer stopped, processed ' + (await consuming).processed)
  try {
    await queen.kv.get('orders', 'ord_8812')
  } catch (err) {
    if (err instanceof QueenError) said.push('after close ' + err.code)
  }
  return said
}

export function typesOnly(r: Awaited<ReturnType<Queen['kv']['get']>>, m: Message): void {
  // @ts-expect-error without narrowing, value may be absent
  const v: unknown = r.found ? r.value : r.value.x
  // @ts-expect-error data is unknown until the caller says what it is
  m.data.id
  void v
}
`;

test('installed from the tarball into a fresh project: the README example type-checks and runs against a cell', async () => {
  const project = path.join(work, 'project');
  const file = path.join(project, 'example.ts');
  fs.writeFileSync(file, EXAMPLE);
  const { program, problems } = strictProgram([file], {
    typeRoots: [path.join(ROOT, 'node_modules', '@types')],
    outDir: project,
  });
  expect(problems).toEqual([]);
  program.emit();
  // Not execFileSync: the cell answers from this process's event loop.
  const { stdout } = await promisify(execFile)(process.execPath, ['-e', `require('./example.js').main(${JSON.stringify(cell.api.url)}).then((s) => console.log(JSON.stringify(s)))`], {
    cwd: project,
    encoding: 'utf8',
    timeout: 60_000,
  });
  expect(JSON.parse(stdout)).toEqual(['state paid', 'absent undefined', 'amount 1200', 'acked true', 'consumer stopped, processed 0', 'after close closed']);
});
