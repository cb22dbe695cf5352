// Reads .cpuprofile files (node --cpu-prof, e.g. from `node dist/bench/kv.js --cpu-prof=DIR`) and
// prints where the busy time went: by package (express, router, body-parser, pg, prom-client, our
// code, node's http/net internals, GC) and the top functions by self time.
//   node dist/bench/profileSummary.js DIR_OR_FILE... [--top=25]
import fs from 'node:fs';
import path from 'node:path';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

function category(url: string, fn: string): string {
  if (fn === '(idle)') return '(idle)';
  if (fn === '(garbage collector)') return '(gc)';
  if (fn === '(program)') return '(program: native, outside JS)';
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url);
  if (nm) return nm[1];
  if (url.startsWith('node:')) {
    const m = /^node:(?:internal\/)?([^/]+(?:\/[^/]+)?)/.exec(url);
    return `node:${m ? m[1].replace(/\.js$/, '') : url}`;
  }
  if (url.includes('/dist/')) return `ours: ${url.slice(url.indexOf('/dist/') + 6)}`;
  return url ? url : `(native: ${fn || 'anonymous'})`;
}

const args = process.argv.slice(2);
const top = Number(args.find((a) => a.startsWith('--top='))?.slice(6) ?? 25);
const files = args
  .filter((a) => !a.startsWith('--'))
  .flatMap((a) => (fs.statSync(a).isDirectory() ? fs.readdirSync(a).filter((f) => f.endsWith('.cpuprofile')).map((f) => path.join(a, f)) : [a]));

const byCat = new Map<string, number>();
const byFn = new Map<string, number>();
let total = 0;
let idle = 0;
for (const file of files) {
  const p = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
  const nodes = new Map(p.nodes.map((n) => [n.id, n]));
  const self = new Map<number, number>();
  p.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (p.timeDeltas[i] ?? 0)));
  for (const [id, us] of self) {
    const n = nodes.get(id)!;
    const cat = category(n.callFrame.url, n.callFrame.functionName);
    if (cat === '(idle)') {
      idle += us;
      continue;
    }
    total += us;
    byCat.set(cat, (byCat.get(cat) ?? 0) + us);
    const fnKey = `${n.callFrame.functionName || '(anonymous)'}  ${n.callFrame.url.replace(/^.*node_modules\//, '').replace(/^.*\/dist\//, 'dist/')}:${n.callFrame.lineNumber + 1}`;
    byFn.set(fnKey, (byFn.get(fnKey) ?? 0) + us);
  }
}
const pct = (us: number) => ((100 * us) / total).toFixed(1).padStart(5);
process.stdout.write(`${files.length} profile(s), busy ${(total / 1e6).toFixed(2)} s, idle ${(idle / 1e6).toFixed(2)} s\n\nby package (self time, % of busy):\n`);
for (const [k, v] of [...byCat].sort((a, b) => b[1] - a[1]).slice(0, 30)) process.stdout.write(`${pct(v)}%  ${k}\n`);
process.stdout.write(`\ntop ${top} functions by self time:\n`);
for (const [k, v] of [...byFn].sort((a, b) => b[1] - a[1]).slice(0, top)) process.stdout.write(`${pct(v)}%  ${k}\n`);
