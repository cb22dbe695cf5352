// The documentation cannot drift from the code it describes: every error code is listed with its
// status, every link resolves, and nothing points outside the repository (a clone has nothing else).
import fs from 'node:fs';
import path from 'node:path';
import { errorCodes } from '../../shared/errors';

const ROOT = path.resolve(__dirname, '../../..');
const SKIP_DIRS = new Set(['node_modules', 'dist', '.git', '.queen']);

function walk(dir: string, out: string[] = []): string[] {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (SKIP_DIRS.has(entry.name)) continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) walk(full, out);
    else out.push(full);
  }
  return out;
}

const markdown = walk(ROOT).filter((f) => f.endsWith('.md'));
const rel = (f: string) => path.relative(ROOT, f);

test('docs/errors.md lists every error code with the status the code answers, and no code the table lacks', () => {
  const text = fs.readFileSync(path.join(ROOT, 'docs/errors.md'), 'utf8');
  const rows = new Map<string, number>();
  for (const m of text.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \|/gm)) rows.set(m[1], Number(m[2]));
  const codes = new Map(errorCodes());
  const missing = [...codes.keys()].filter((c) => !rows.has(c));
  const unknown = [...rows.keys()].filter((c) => !codes.has(c));
  const wrong = [...codes].filter(([c, s]) => rows.has(c) && rows.get(c) !== s).map(([c, s]) => `${c}: ${rows.get(c)} in the doc, ${s} in the code`);
  expect({ missing, unknown, wrong }).toEqual({ missing: [], unknown: [], wrong: [] });
});

test('every code the cell can answer is in the table: each ApiError the TypeScript raises, each refusal the SQL raises', () => {
  const codes = new Map(errorCodes());
  const source = walk(ROOT).filter((f) => /^(services|shared)\//.test(rel(f)) && f.endsWith('.ts'));
  const sql = walk(path.join(ROOT, 'sql/functions')).filter((f) => f.endsWith('.sql'));
  const raised = new Map<string, string>();
  for (const file of source) {
    for (const m of fs.readFileSync(file, 'utf8').matchAll(/ApiError\(\s*'([a-z_]+)'/g)) raised.set(m[1], rel(file));
  }
  for (const file of sql) {
    const text = fs.readFileSync(file, 'utf8');
    for (const m of text.matchAll(/fail_v1\(\s*'([a-z_]+)'/g)) raised.set(m[1], rel(file));
    // queen.array_length_v1(array, code, message, index, max, big_code, big_message): both codes.
    for (const m of text.matchAll(/array_length_v1\(\s*[^,]+,\s*'([a-z_]+)',\s*'(?:[^']|'')*',\s*[^,]+,\s*[^,]+,\s*'([a-z_]+)'/g)) {
      raised.set(m[1], rel(file));
      raised.set(m[2], rel(file));
    }
  }
  expect(raised.size).toBeGreaterThan(80);
  expect([...raised].filter(([code]) => !codes.has(code)).map(([code, file]) => `${code} (${file})`)).toEqual([]);
});

// The anchors a Markdown page's headings make, as GitHub makes them: lower case, punctuation
// dropped, each space a hyphen, and a repeated heading numbered from -1.
function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^(```|~~~)/.test(line)) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const slug = heading[1].toLowerCase().replace(/[^\p{L}\p{N}\p{M}\p{Pc} -]/gu, '').replace(/ /g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n ? `${slug}-${n}` : slug);
  }
  return out;
}

test('every relative link in the README, CONTRIBUTING and docs resolves to a file in the repository, and its #anchor to a heading of that page', () => {
  expect(markdown.length).toBeGreaterThan(5);
  const broken: string[] = [];
  for (const file of markdown) {
    const text = fs.readFileSync(file, 'utf8');
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const target = m[1];
      if (/^[a-z]+:/i.test(target)) continue;
      const [page, anchor] = target.split('#');
      const resolved = page ? path.resolve(path.dirname(file), page) : file;
      if (!fs.existsSync(resolved)) broken.push(`${rel(file)} -> ${target}`);
      else if (anchor !== undefined && resolved.endsWith('.md') && !anchors(fs.readFileSync(resolved, 'utf8')).has(anchor)) {
        broken.push(`${rel(file)} -> ${target} (no such heading)`);
      }
    }
  }
  expect(broken).toEqual([]);
});

test('the README is the front door: short, with the two set-up commands and a link to every page of docs/', () => {
  const readme = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');
  expect(readme.split('\n').length).toBeLessThanOrEqual(250);
  expect(readme).toContain('npm ci && npm start');
  expect(readme).toContain('npm ci && npm test');
  const pages = fs.readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md'));
  expect(pages.filter((p) => !readme.includes(`(docs/${p})`))).toEqual([]);
});

test('nothing in the repository points at documents a clone does not have', () => {
  // The contract's documents by name, and the prose ways of pointing at them: in docs, and in the
  // comments of sql/, test/ and bench/ alike (every text file is read).
  const outside = /SPEC section|SPEC\.md|shared\/spec\/|STYLE\.md|\bseeds\b|\bthe (operations )?seeds?\b|\bkv-[a-z-]+\.md\b|queen-wire\.md|\bthe (KV )?design\b|\bthe issue\b|\bissue #?\d+/i;
  const text = /\.(ts|js|sql|md|ya?ml|json|sh|txt)$|(^|\/)(Procfile|run)$/;
  const self = 'test/docs/docs.test.ts';
  const offenders = walk(ROOT)
    .filter((f) => text.test(f) && !f.endsWith('package-lock.json'))
    .filter((f) => outside.test(fs.readFileSync(f, 'utf8')))
    .map(rel)
    .filter((f) => f !== self);
  expect(offenders).toEqual([]);
});

test('docs/configuration.md names every variable the config reads, and reads nothing it does not name', () => {
  const config = fs.readFileSync(path.join(ROOT, 'shared', 'config.ts'), 'utf8');
  // Every read goes through env (int(env, 'NAME', ...), env.NAME, env['NAME']); a retired name the
  // config refuses is a quoted QUEEN_ name.
  const read = new Set([...config.matchAll(/\benv(?:, '|\.|\[')([A-Z][A-Z0-9_]+)|'(QUEEN_[A-Z0-9_]+)'/g)].map((m) => m[1] ?? m[2]));
  const page = fs.readFileSync(path.join(ROOT, 'docs', 'configuration.md'), 'utf8');
  const named = new Set([...page.matchAll(/`([A-Z][A-Z0-9]*_[A-Z0-9_]+|PORT)`/g)].map((m) => m[1]));
  expect([...read].filter((v) => !named.has(v)).sort()).toEqual([]);
  // A variable named on the page is read by the config, by the PostgreSQL client (PG*) or by the
  // OpenTelemetry SDK (OTEL_*, shared/tracing.ts).
  expect([...named].filter((v) => !read.has(v) && !v.startsWith('PG') && !v.startsWith('OTEL_')).sort()).toEqual([]);
});
