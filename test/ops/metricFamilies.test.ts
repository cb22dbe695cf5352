// Each process exports its own metric families and none of the other's (shared/metrics.ts): the API
// (a real cluster: its primary merges the workers' registries) and a sweeper process, both as an
// operator runs them. One registry for both had the API's /metrics carry queen_sweeper_cycle_seconds
// and the log's gauges with no series, and the sweeper's carry the KV latency histogram, which
// dashboards and absent() alerts read as a process that is up.
import { freePort } from '../../shared/embeddedPostgres';
import { createApiMetrics, createSweeperMetrics } from '../../shared/metrics';
import { checkExposition, scrape } from '../support/metrics';
import { spawnApi, spawnSweeper, SweeperProcess, untilHealthy, useSpawnedDatabase } from '../support/processes';

const db = useSpawnedDatabase();
const { started } = db;

const names = (register: { getMetricsAsArray(): { name: string }[] }) => new Set(register.getMetricsAsArray().map((m) => m.name));
const API = names(createApiMetrics().register);
const SWEEPER = names(createSweeperMetrics().register);
const onlyIn = (a: Set<string>, b: Set<string>) => [...a].filter((n) => !b.has(n));

/** Families of the given names present in the exposition (a family is present by its TYPE line). */
const present = (families: Map<string, unknown>, wanted: Iterable<string>) => [...wanted].filter((n) => families.has(n));

test('the two definitions share only the switch gauge', () => {
  expect([...API].filter((n) => SWEEPER.has(n))).toEqual(['queen_kv_timers_switch']);
  expect(onlyIn(SWEEPER, API).length).toBeGreaterThan(15);
  expect(onlyIn(API, SWEEPER).length).toBeGreaterThan(10);
});

test("the API's /metrics has every API family and none of the sweeper's", async () => {
  const port = await freePort();
  const api = spawnApi({ DATABASE_URL: db.url, PORT: String(port), QUEEN_WORKERS: '2', DB_POOL_SIZE: '10' });
  started.push(api);
  await untilHealthy(api, port);
  const families = checkExposition(await scrape(port));
  expect(present(families, onlyIn(SWEEPER, API))).toEqual([]);
  // Named too, so a definition that drifted back into one registry still fails here.
  for (const name of ['queen_sweeper_cycle_seconds', 'queen_sweeper_cycles_total', 'queen_log_backlog_messages', 'queen_kv_expired_not_pruned', 'queen_timers_fired_total']) {
    expect(families.has(name)).toBe(false);
  }
  expect(onlyIn(API, new Set(families.keys()))).toEqual([]);
  expect(families.has('queen_kv_op_duration_seconds')).toBe(true);
  // prom-client's process metrics are every process's own.
  expect(families.has('process_cpu_user_seconds_total')).toBe(true);
});

test("the sweeper's /metrics has every sweeper family and none of the API's", async () => {
  const sweeper: SweeperProcess = await spawnSweeper(db.url);
  started.push(sweeper);
  const families = checkExposition(await scrape(sweeper.metricsPort));
  expect(present(families, onlyIn(API, SWEEPER))).toEqual([]);
  for (const name of ['queen_kv_op_duration_seconds', 'queen_kv_ops_total', 'queen_http_responses_total', 'queen_log_request_duration_seconds', 'queen_kv_pool_in_use', 'queen_timers_scheduled_total']) {
    expect(families.has(name)).toBe(false);
  }
  expect(onlyIn(SWEEPER, new Set(families.keys()))).toEqual([]);
  expect(families.has('queen_sweeper_cycle_seconds')).toBe(true);
  expect(families.has('process_cpu_user_seconds_total')).toBe(true);
});
