// deploy/prometheus: the rules and scrape configs load in Prometheus's own tool, the alerts fire on
// the series they are about (promtool test rules), and every name they read is one the services
// expose. Where promtool is missing, the structural checks still run and say so; with
// QUEEN_REQUIRE_PROMTOOL=1 (CI) a missing promtool fails.
import fs from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { createApiMetrics, createSweeperMetrics } from '../../shared/metrics';
import { exposes, metricNames, parseExposition, PROMTOOL, promtool } from '../support/metrics';
import { REPO } from '../support/processes';

const DIR = path.join(REPO, 'deploy', 'prometheus');
const read = (file: string) => parse(fs.readFileSync(path.join(DIR, file), 'utf8'));

function requirePromtool(): boolean {
  if (PROMTOOL) return true;
  if (process.env.QUEEN_REQUIRE_PROMTOOL === '1') throw new Error('QUEEN_REQUIRE_PROMTOOL=1 but promtool is not installed (apt-get install prometheus)');
  process.stderr.write('[deploy tests] promtool not installed: Prometheus files checked structurally only\n');
  return false;
}

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

const rules = (): Rule[] => (read('alerts.yml').groups as { name: string; rules: Rule[] }[]).flatMap((g) => g.rules);

test('alerts.yml: promtool check rules, and the unit tests in alerts.test.yml pass', () => {
  if (!requirePromtool()) return;
  const checked = promtool(['check', 'rules', 'deploy/prometheus/alerts.yml']);
  expect(checked.output).toContain('SUCCESS');
  expect(checked.status).toBe(0);
  const tested = promtool(['test', 'rules', 'deploy/prometheus/alerts.test.yml']);
  expect(tested.output).toContain('SUCCESS');
  expect(tested.status).toBe(0);
});

test('the alerts cover the gauges docs/operations.md says to watch, each with a severity, a summary and a hold time', () => {
  const all = rules();
  const byName = new Map(all.map((r) => [r.alert, r]));
  const expectations: [string, RegExp][] = [
    ['QueenKvExpiredNotPrunedGrowing', /queen_kv_expired_not_pruned/],
    ['QueenKvExpiryLagHigh', /queen_kv_expiry_lag_seconds/],
    ['QueenTimersLate', /queen_timers_oldest_late_seconds/],
    ['QueenTimersFireSwitchedOff', /queen_kv_timers_switch\{switch="timersFire"\}/],
    ['QueenKvUnavailableRefusals', /queen_kv_refusals_total\{code="kv_unavailable"\}/],
    ['QueenSweeperStopped', /queen_sweeper_cycles_total/],
    ['QueenDatabaseUnavailable', /queen_http_responses_total\{code="db_unavailable"\}/],
    ['QueenApiInternalErrors', /queen_http_responses_total\{code="internal"\}/],
    ['QueenApiDown', /\(up\{job="queen-api"\}\) == 0 or absent\(up\{job="queen-api"\}\)/],
    ['QueenApiTargetDown', /^up\{job="queen-api"\} == 0$/],
    ['QueenRateLimitsLocalFallback', /queen_kv_rate_store_fallback/],
    ['QueenLogBacklogGrowing', /queen_log_backlog_messages/],
    ['QueenLogOldestUnconsumedOld', /queen_log_oldest_unconsumed_age_seconds/],
    ['QueenLogDeadLetters', /queen_log_dead_letters/],
  ];
  for (const [name, expr] of expectations) {
    expect(byName.get(name)?.expr).toMatch(expr);
  }
  for (const r of all) {
    expect(r.alert).toMatch(/^Queen[A-Za-z]+$/);
    expect(['warning', 'critical']).toContain(r.labels?.severity);
    expect(r.annotations?.summary).toBeTruthy();
    expect(r.for).toMatch(/^\d+[smh]$/);
  }
});

/** GitHub's heading anchor: lower case, punctuation other than - and _ dropped, spaces to -. */
const anchor = (heading: string) => heading.trim().toLowerCase().replace(/[^\p{L}\p{N} _-]/gu, '').replace(/ /g, '-');

test('every alert links its own section of docs/runbook.md, and every section there is an alert', () => {
  const runbook = fs.readFileSync(path.join(REPO, 'docs', 'runbook.md'), 'utf8');
  const anchors = [...runbook.matchAll(/^##+ (.+)$/gm)].map((m) => anchor(m[1]));
  const alertSections = [...runbook.matchAll(/^## (Queen[A-Za-z]+)$/gm)].map((m) => m[1]);
  const wrong = rules()
    .filter((r) => r.annotations?.runbook_url !== `docs/runbook.md#${anchor(r.alert!)}` || !anchors.includes(anchor(r.alert!)))
    .map((r) => `${r.alert}: ${r.annotations?.runbook_url}`);
  expect(wrong).toEqual([]);
  expect(alertSections.sort()).toEqual(rules().map((r) => r.alert!).sort());
  // Each section says what it means, what to check and what to do.
  for (const section of runbook.split(/^## (?=Queen)/m).slice(1)) {
    expect([section.split('\n')[0], /\*\*What it means\*\*/.test(section), /\*\*What to check\*\*/.test(section), /\*\*What to do\*\*/.test(section)])
      .toEqual([section.split('\n')[0], true, true, true]);
  }
});

test('two cells in one Prometheus never merge: every aggregation keeps the namespace', () => {
  const merging: string[] = [];
  for (const r of rules()) {
    // sum/max/min/avg/count over series, with or without `by (...)`; absent() has no cell to keep.
    for (const m of r.expr.matchAll(/\b(sum|max|min|avg|count)\s*(?:by\s*\(([^)]*)\)\s*)?\(/g)) {
      const by = (m[2] ?? '').split(',').map((l) => l.trim());
      if (!by.includes('namespace')) merging.push(`${r.alert}: ${m[0]}`);
    }
  }
  expect(merging).toEqual([]);
  // And the static scrape config names the cell on each target, as the Kubernetes one does from the pod's namespace.
  for (const job of read('prometheus.static.yml').scrape_configs) expect(job.static_configs[0].labels?.namespace).toBeTruthy();
  for (const job of read('prometheus.yml').scrape_configs) {
    expect(job.relabel_configs).toContainEqual({ source_labels: ['__meta_kubernetes_namespace'], target_label: 'namespace' });
  }
});

test('every metric an alert reads is one the services expose', async () => {
  // Either process's: an alert reads the API's families, the sweeper's, or the switch both export.
  const families = new Map([
    ...parseExposition(await createApiMetrics().register.metrics()),
    ...parseExposition(await createSweeperMetrics().register.metrics()),
  ]);
  const unknown = rules().flatMap((r) => metricNames(r.expr).filter((n) => n !== 'up' && !exposes(families, n)).map((n) => `${r.alert}: ${n}`));
  expect(unknown).toEqual([]);
});

test('the scrape configs: promtool check config, two jobs, the rule file they load', () => {
  for (const file of ['prometheus.yml', 'prometheus.static.yml']) {
    const config = read(file);
    expect(config.rule_files).toEqual(['alerts.yml']);
    expect(config.scrape_configs.map((j: { job_name: string }) => j.job_name)).toEqual(['queen-api', 'queen-sweeper']);
    for (const job of config.scrape_configs) expect(job.metrics_path).toBe('/metrics');
  }
  const statics = read('prometheus.static.yml').scrape_configs.map((j: any) => j.static_configs[0].targets[0]);
  expect(statics).toEqual(['localhost:6632', 'localhost:6633']);
  if (!requirePromtool()) return;
  const plain = promtool(['check', 'config', 'deploy/prometheus/prometheus.static.yml']);
  expect(plain.output).toContain('is valid prometheus config file syntax');
  expect(plain.status).toBe(0);
  const k8s = promtool(['check', 'config', 'deploy/prometheus/prometheus.yml']);
  if (k8s.status !== 0) {
    // Debian's prometheus is built without Kubernetes discovery; that field, and only it, may be refused.
    const problems = k8s.output.split('\n').filter((l) => /^\s+line \d+:/.test(l));
    expect(problems.length).toBeGreaterThan(0);
    for (const p of problems) expect(p).toMatch(/field kubernetes_sd_configs not found/);
  } else {
    expect(k8s.output).toContain('is valid prometheus config file syntax');
  }
});

test('the Kubernetes scrape jobs keep exactly the pods and ports deploy/k8s declares', () => {
  const k8sDir = path.join(REPO, 'deploy', 'k8s');
  const deployments = fs
    .readdirSync(k8sDir)
    .filter((f) => f.endsWith('.yaml'))
    .flatMap((f) => String(fs.readFileSync(path.join(k8sDir, f), 'utf8')).split(/^---$/m).map((d) => parse(d)))
    .filter((d) => d?.kind === 'Deployment');
  for (const job of read('prometheus.yml').scrape_configs) {
    expect(job.kubernetes_sd_configs).toEqual([{ role: 'pod' }]);
    const [labelKeep, portKeep] = job.relabel_configs.filter((r: any) => r.action === 'keep');
    const [name, component] = labelKeep.regex.split(';');
    const target = deployments.find((d) => d.spec.template.metadata.labels['app.kubernetes.io/component'] === component);
    expect(target).toBeDefined();
    expect(target.spec.template.metadata.labels['app.kubernetes.io/name']).toBe(name);
    expect(target.spec.template.spec.containers[0].ports.map((p: any) => p.name)).toContain(portKeep.regex);
  }
});
