// The package as it ships: importable as the README says, its own name, no runtime
// dependency beyond Node 20, pg and @opentelemetry/api only as optional peers, types beside the JavaScript.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const CLIENT = path.join(ROOT, 'client');

test('node can import client/dist/index.js and make a Queen, and require the pg entry by its package name', () => {
  const out = execFileSync(
    process.execPath,
    ['-e', "import('./client/dist/index.js').then(m => { new m.Queen({ url: 'http://127.0.0.1:6632' }); console.log(typeof m.Queen) })"],
    { cwd: ROOT, encoding: 'utf8' },
  );
  expect(out.trim()).toBe('function');
  const pgEntry = execFileSync(process.execPath, ['-e', "console.log(typeof require('@queen-kv/client/pg').kvOn)"], { cwd: ROOT, encoding: 'utf8' });
  expect(pgEntry.trim()).toBe('function');
});

test('its package.json: the name, the two entries with their types, no dependencies, pg and @opentelemetry/api optional peers', () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(CLIENT, 'package.json'), 'utf8'));
  expect(pkg.name).toBe('@queen-kv/client');
  expect(pkg.dependencies).toBeUndefined();
  expect(pkg.peerDependencies).toEqual({ pg: expect.any(String), '@opentelemetry/api': expect.any(String) });
  expect(pkg.peerDependenciesMeta).toEqual({ pg: { optional: true }, '@opentelemetry/api': { optional: true } });
  expect(pkg.exports['.']).toEqual({ types: './dist/index.d.ts', default: './dist/index.js' });
  expect(pkg.exports['./pg']).toEqual({ types: './dist/pg.d.ts', default: './dist/pg.js' });
  for (const f of ['index.js', 'index.d.ts', 'pg.js', 'pg.d.ts']) expect(fs.existsSync(path.join(CLIENT, 'dist', f))).toBe(true);
});

test('the source imports nothing but Node built-ins and its own modules', () => {
  const dir = path.join(CLIENT, 'src');
  const specifiers = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.ts'))
    .flatMap((f) => [...fs.readFileSync(path.join(dir, f), 'utf8').matchAll(/^\s*(?:import|export)\b[^'"]*?from\s+'([^']+)'/gm)].map((m) => m[1]));
  expect(specifiers.length).toBeGreaterThan(0);
  expect(specifiers.filter((s) => !s.startsWith('./') && !s.startsWith('node:'))).toEqual([]);
});
