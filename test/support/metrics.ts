// Metrics for tests: one reader of the Prometheus text a /metrics endpoint serves (`sample`, and
// `metric`/`counter`, which scrape first), and the strict check of the exposition format the
// deployment suites run (`parseExposition`, `checkExposition`, with promtool where it is installed).
//
// The check follows https://prometheus.io/docs/instrumenting/exposition_formats/ (0.0.4): HELP and
// TYPE before a family's samples, valid names, quoted and escaped label values, float values,
// histogram buckets ordered with a +Inf bucket equal to _count, no series twice. `promtool check
// metrics` is the real parser and linter; this reader runs everywhere, so the check never silently
// passes on a machine without promtool.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { request } from './http';

/**
 * The value of one series: the first sample named `name` whose labels include every one of
 * `labels` (undefined when there is none).
 */
export function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const have: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) have[k] = v;
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3]);
  }
  return undefined;
}

/** The text of a metrics endpoint: `target` is a base URL or a port on 127.0.0.1. */
export async function scrape(target: string | number, path = '/metrics'): Promise<string> {
  const res = await request(target, 'GET', path);
  if (res.status !== 200) throw new Error(`GET ${path} answered ${res.status}`);
  return res.text;
}

const described = (name: string, labels: Record<string, string>) =>
  `${name}{${Object.entries(labels).map(([k, v]) => `${k}="${v}"`).join(',')}}`;

/** One series' value on a metrics endpoint; fails when the series is not there. */
export async function metric(target: string | number, name: string, labels: Record<string, string> = {}): Promise<number> {
  const value = sample(await scrape(target), name, labels);
  if (value === undefined) throw new Error(`${described(name, labels)} is not on the metrics endpoint`);
  return value;
}

/** A labelled counter's value, 0 while it has no series (prom-client shows one from its first increment). */
export async function counter(target: string | number, name: string, labels: Record<string, string> = {}): Promise<number> {
  return sample(await scrape(target), name, labels) ?? 0;
}

export const PROMTOOL = (() => {
  const r = spawnSync('promtool', ['--version'], { encoding: 'utf8' });
  return r.status === 0 ? 'promtool' : undefined;
})();

export function promtool(args: string[], input?: string): { status: number | null; output: string } {
  if (!PROMTOOL) throw new Error('promtool is not installed');
  const r = spawnSync(PROMTOOL, args, { input, encoding: 'utf8', cwd: path.resolve(__dirname, '..', '..', '..') });
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}
export interface Family {
  name: string;
  type: string;
  help: string;
  samples: { name: string; labels: Record<string, string>; value: number }[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

/** Prometheus reads values with Go's ParseFloat: NaN and Inf in any case (prom-client writes "Nan"). */
function parseValue(raw: string, where: string): number {
  const lower = raw.toLowerCase();
  if (['+inf', 'inf', '+infinity', 'infinity'].includes(lower)) return Infinity;
  if (['-inf', '-infinity'].includes(lower)) return -Infinity;
  if (lower === 'nan') return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(raw)) throw new Error(`${where}: "${raw}" is not a float`);
  return Number(raw);
}

function parseLabels(raw: string, where: string): Record<string, string> {
  const labels: Record<string, string> = {};
  let i = 0;
  while (i < raw.length) {
    const eq = raw.indexOf('=', i);
    if (eq < 0) throw new Error(`${where}: label without "="`);
    const name = raw.slice(i, eq).trim();
    if (!LABEL_NAME.test(name) || name.startsWith('__')) throw new Error(`${where}: bad label name "${name}"`);
    if (raw[eq + 1] !== '"') throw new Error(`${where}: label ${name} value is not quoted`);
    let j = eq + 2;
    let value = '';
    for (;;) {
      if (j >= raw.length) throw new Error(`${where}: unterminated value of label ${name}`);
      const c = raw[j];
      if (c === '\\') {
        const n = raw[j + 1];
        if (n === 'n') value += '\n';
        else if (n === '\\' || n === '"') value += n;
        else throw new Error(`${where}: bad escape \\${n} in label ${name}`);
        j += 2;
      } else if (c === '"') {
        j++;
        break;
      } else {
        value += c;
        j++;
      }
    }
    if (name in labels) throw new Error(`${where}: label ${name} twice`);
    labels[name] = value;
    if (j < raw.length) {
      if (raw[j] !== ',') throw new Error(`${where}: expected "," after label ${name}`);
      j++;
    }
    i = j;
  }
  return labels;
}

/** Parses and checks; throws a sentence naming the line on the first violation. */
export function parseExposition(text: string): Map<string, Family> {
  const families = new Map<string, Family>();
  const seenSeries = new Set<string>();
  let current: Family | undefined;
  const familyOf = (sampleName: string): Family | undefined => {
    if (current && (sampleName === current.name || (['histogram', 'summary'].includes(current.type) && /^(.*)_(bucket|sum|count)$/.exec(sampleName)?.[1] === current.name))) return current;
    return undefined;
  };
  if (!text.endsWith('\n')) throw new Error('the exposition does not end with a newline');
  text.split('\n').forEach((line, index) => {
    const where = `line ${index + 1} (${line.slice(0, 80)})`;
    if (line === '') return;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (!m) return; // a plain comment
      const [, kind, name, rest] = m;
      if (!METRIC_NAME.test(name)) throw new Error(`${where}: bad metric name`);
      let family = families.get(name);
      if (family && family !== current) throw new Error(`${where}: family ${name} declared twice or interleaved`);
      if (!family) {
        family = { name, type: 'untyped', help: '', samples: [] };
        families.set(name, family);
      }
      current = family;
      if (kind === 'TYPE') {
        if (!TYPES.has(rest)) throw new Error(`${where}: unknown type "${rest}"`);
        if (family.samples.length) throw new Error(`${where}: TYPE after samples`);
        family.type = rest;
      } else family.help = rest;
      return;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+(-?\d+))?$/.exec(line);
    if (!m) throw new Error(`${where}: not a sample line`);
    const [, name, rawLabels, rawValue] = m;
    const family = familyOf(name);
    if (!family) throw new Error(`${where}: sample ${name} outside its family's HELP/TYPE block`);
    const labels = parseLabels(rawLabels ?? '', where);
    const value = parseValue(rawValue, where);
    const key = `${name}{${Object.entries(labels).sort().map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(',')}}`;
    if (seenSeries.has(key)) throw new Error(`${where}: series ${key} twice`);
    seenSeries.add(key);
    if (family.type === 'counter' && !(value >= 0)) throw new Error(`${where}: counter below zero`);
    family.samples.push({ name, labels, value });
  });
  for (const f of families.values()) {
    if (!f.help) throw new Error(`family ${f.name} has no HELP`);
    if (f.type === 'histogram') checkHistogram(f);
  }
  return families;
}

function checkHistogram(f: Family): void {
  const groups = new Map<string, { buckets: [number, number][]; sum?: number; count?: number }>();
  for (const s of f.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    const g = groups.get(key) ?? { buckets: [] };
    groups.set(key, g);
    if (s.name === `${f.name}_bucket`) {
      if (le === undefined) throw new Error(`${f.name}: a bucket without le`);
      g.buckets.push([parseValue(le, `${f.name} le`), s.value]);
    } else if (s.name === `${f.name}_sum`) g.sum = s.value;
    else if (s.name === `${f.name}_count`) g.count = s.value;
    else throw new Error(`${f.name}: unexpected sample ${s.name}`);
  }
  for (const [key, g] of groups) {
    if (g.sum === undefined || g.count === undefined) throw new Error(`${f.name}${key}: _sum or _count missing`);
    if (!g.buckets.length || g.buckets[g.buckets.length - 1][0] !== Infinity) throw new Error(`${f.name}${key}: no +Inf bucket last`);
    for (let i = 1; i < g.buckets.length; i++) {
      if (!(g.buckets[i][0] > g.buckets[i - 1][0])) throw new Error(`${f.name}${key}: buckets not in increasing le`);
      if (g.buckets[i][1] < g.buckets[i - 1][1]) throw new Error(`${f.name}${key}: bucket counts decrease`);
    }
    if (g.buckets[g.buckets.length - 1][1] !== g.count) throw new Error(`${f.name}${key}: +Inf bucket differs from _count`);
  }
}

const ACCEPTED_LINT = /^nodejs_active_(handles|requests|resources)_total non-counter metrics should not have "_total" suffix$/;

/**
 * The check a test runs: our reader always, promtool too where it is installed. With
 * QUEEN_REQUIRE_PROMTOOL=1 (CI, where `apt-get install prometheus` runs first) a missing promtool fails.
 */
export function checkExposition(text: string): Map<string, Family> {
  const families = parseExposition(text);
  if (PROMTOOL) {
    // Exit 1 is a parse failure; exit 3 is lint only. The one lint we accept is prom-client's own
    // default gauges named *_total (nodejs_active_handles_total and kin), which we do not rename.
    const r = promtool(['check', 'metrics'], text);
    const lint = r.output.split('\n').filter((l) => l.trim() !== '' && !ACCEPTED_LINT.test(l));
    if (r.status === 1 || (r.status !== 0 && lint.length > 0) || r.status === null) {
      throw new Error(`promtool check metrics failed (${r.status}):\n${r.output}`);
    }
  } else if (process.env.QUEEN_REQUIRE_PROMTOOL === '1') {
    throw new Error('QUEEN_REQUIRE_PROMTOOL=1 but promtool is not installed (apt-get install prometheus)');
  }
  return families;
}

// The metric names a PromQL expression reads. Not a PromQL parser: it removes what cannot be a
// metric name (strings, label matchers, ranges, grouping clauses, function calls, keywords,
// numbers, Grafana variables) and keeps the identifiers left.
const KEYWORDS = new Set([
  'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset',
  'inf', 'nan', 'atan2',
]);

export function metricNames(expr: string): string[] {
  let s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, ' ') // strings
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges and subqueries
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ') // grouping labels
    .replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/g, ' '); // Grafana variables
  const names = new Set<string>();
  for (const m of s.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const name = m[0];
    const after = s.slice(m.index! + name.length).trimStart();
    if (after.startsWith('(')) continue; // a function
    if (KEYWORDS.has(name.toLowerCase())) continue;
    const before = s.slice(0, m.index!);
    if (/[0-9.]$/.test(before) || /^[eE][0-9+-]/.test(name)) continue; // part of a number such as 1e-9
    names.add(name);
  }
  return [...names];
}

/** Whether `name` is a sample a family of `families` exposes (a histogram's _bucket/_sum/_count too). */
export function exposes(families: Map<string, { type: string }>, name: string): boolean {
  if (families.has(name)) return true;
  const m = /^(.*)_(bucket|sum|count)$/.exec(name);
  return !!m && ['histogram', 'summary'].includes(families.get(m[1])?.type ?? '');
}
