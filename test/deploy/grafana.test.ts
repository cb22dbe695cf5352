// The dashboard reads only metrics the services expose: the API's from a running API's /metrics,
// the sweeper's from its registry's definition (shared/metrics.ts createSweeperMetrics).
import fs from 'node:fs';
import path from 'node:path';
import { createSweeperMetrics } from '../../shared/metrics';
import { request } from '../support/http';
import { exposes, Family, metricNames, parseExposition } from '../support/metrics';
import { REPO } from '../support/processes';
import { startTestApi, TestApi } from '../support/api';

const DASHBOARD = path.join(REPO, 'deploy', 'grafana', 'queen-kv.json');

let api: TestApi;
let apiFamilies: Map<string, Family>;
let sweeperFamilies: Map<string, Family>;

beforeAll(async () => {
  api = await startTestApi();
  const scraped = await request(api.server.port, 'GET', '/metrics');
  expect(scraped.status).toBe(200);
  apiFamilies = parseExposition(scraped.text);
  sweeperFamilies = parseExposition(await createSweeperMetrics().register.metrics());
});
afterAll(() => api.close());

interface Panel {
  title: string;
  type: string;
  targets?: { expr: string; refId: string }[];
  panels?: Panel[];
}

function panels(): Panel[] {
  const dashboard = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8'));
  const flat: Panel[] = [];
  const walk = (list: Panel[]) => list.forEach((p) => (flat.push(p), walk(p.panels ?? [])));
  walk(dashboard.panels);
  return flat;
}

test('every panel query names metrics the API or the sweeper exposes', () => {
  const queries = panels().flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, expr: t.expr })));
  expect(queries.length).toBeGreaterThan(15);
  const unknown: string[] = [];
  for (const { panel, expr } of queries) {
    const names = metricNames(expr);
    expect(names.length).toBeGreaterThan(0);
    // A query pinned to a job must be answerable by that job's process.
    const sources = /job="queen-api"/.test(expr) ? [apiFamilies] : /job="queen-sweeper"/.test(expr) ? [sweeperFamilies] : [apiFamilies, sweeperFamilies];
    for (const name of names) if (!sources.some((f) => exposes(f, name))) unknown.push(`${panel}: ${name}`);
  }
  expect(unknown).toEqual([]);
});

test('the panels an operator on call reads are there', () => {
  const exprs = panels().flatMap((p) => (p.targets ?? []).map((t) => t.expr)).join('\n');
  for (const family of [
    'queen_kv_ops_total', 'queen_kv_refusals_total', 'queen_kv_pool_in_use', 'queen_kv_pool_waiting',
    'queen_timers_due', 'queen_timers_oldest_late_seconds', 'queen_timers_fired_total',
    'queen_sweeper_cycle_seconds_bucket', 'queen_sweeper_batch_size', 'queen_sweeper_phase_suspended',
    'queen_kv_timers_switch', 'queen_kv_expired_not_pruned', 'queen_kv_expiry_lag_seconds', 'queen_http_responses_total',
    // The message log's rows, and the rate limits' shared buckets and their local fallback.
    'queen_log_request_duration_seconds_bucket', 'queen_log_request_duration_seconds_count', 'queen_log_backlog_messages',
    'queen_log_backlog_max_group_messages', 'queen_log_oldest_unconsumed_age_seconds', 'queen_log_dead_letters',
    'queen_kv_rate_store_fallback', 'queen_kv_rate_processes',
  ]) {
    expect(exprs).toContain(family);
  }
  expect(exprs).toMatch(/sum by \(op, outcome\) \(rate\(queen_kv_ops_total/);
  expect(exprs).toMatch(/sum by \(code\) \(rate\(queen_kv_refusals_total/);
});

test('one cell at a time: every query reads the namespace chosen in the cell picker', () => {
  const dashboard = JSON.parse(fs.readFileSync(DASHBOARD, 'utf8'));
  const picker = dashboard.templating.list.find((v: { name: string }) => v.name === 'namespace');
  expect(picker?.query?.query).toMatch(/^label_values\(up\{[^}]*\}, namespace\)$/);
  const unscoped: string[] = [];
  for (const p of panels()) {
    for (const t of p.targets ?? []) {
      // Every selector of a metric, with its matchers: each must carry namespace="$namespace".
      for (const m of t.expr.matchAll(/\b((?:queen|process|nodejs)_[A-Za-z0-9_:]*)(\{[^}]*\})?/g)) {
        if (!(m[2] ?? '').includes('namespace="$namespace"')) unscoped.push(`${p.title}: ${m[0]}`);
      }
    }
  }
  expect(unscoped).toEqual([]);
});

test('the name extractor sees through functions, matchers, ranges and grouping', () => {
  expect(metricNames('histogram_quantile(0.99, sum by (le, route) (rate(a_bucket{job="x",le!="1"}[$__rate_interval])))')).toEqual(['a_bucket']);
  expect(metricNames('max(b) > 1e-9 and on (pod) c offset 5m or absent(up{job="y"} == 1)').sort()).toEqual(['b', 'c', 'up']);
});
