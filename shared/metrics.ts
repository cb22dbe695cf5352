// The Prometheus families of docs/operations.md, present from boot so an alert can be written before
// the first key. Label sets are small and closed. Each process has its own registry holding only the
// families it moves: the API's (createApiMetrics) and the sweeper's (createSweeperMetrics). One
// registry for both exported each process's families on the other's /metrics with no series or a
// 0 nobody measured, which dashboards and absent() read as a process that is up. The switch gauge is
// the one family in both: each process reports the switches it reads.
import client from 'prom-client';
import { KV_OPS } from './kvOps';

type Gauge<L extends string> = client.Gauge<L>;
type GaugeMaker = <L extends string>(name: string, help: string, labelNames?: readonly L[], aggregator?: client.Aggregator) => Gauge<L>;

function makers(register: client.Registry) {
  const r = [register];
  const counter = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) =>
    new client.Counter<L>({ name, help, labelNames, registers: r });
  // `aggregator` says how the API primary merges one gauge across cluster workers: a per-worker
  // quantity (pool in use) sums; a view of shared state (a switch, a table's backlog) must not be
  // counted once per worker, so it takes the min (any worker paused reads paused) or the max.
  const gauge: GaugeMaker = <L extends string>(name: string, help: string, labelNames: readonly L[] = [], aggregator: client.Aggregator = 'sum') =>
    new client.Gauge<L>({ name, help, labelNames, registers: r, aggregator });
  // The log's gauges carry no sample until the sweeper's first reading (see below).
  const reading = (name: string, help: string) => {
    const g = gauge(name, help, [], 'max');
    g.remove();
    return g;
  };
  return { r, counter, gauge, reading };
}

const switchGauge = (gauge: GaugeMaker) =>
  gauge('queen_kv_timers_switch', 'Kill switch state as this process sees it: 1 on, 0 paused.', ['switch'] as const, 'min');

/** The API's families: the KV, timer and message-log surfaces it answers, its pools, the rate limits, the switches. */
export function createApiMetrics(register = new client.Registry()) {
  const { r, counter, gauge } = makers(register);
  return {
    register,
    // KV surface (API)
    kvOps: counter('queen_kv_ops_total', 'KV operations answered, by op and outcome (ok, precondition, refused, error).', ['op', 'outcome'] as const),
    kvDuration: new client.Histogram<'route'>({
      name: 'queen_kv_op_duration_seconds',
      help: 'Time to answer one KV request, from routing to the response, by route (batch, get, put, delete).',
      labelNames: ['route'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: r,
    }),
    kvRefusals: counter('queen_kv_refusals_total', 'KV and timer requests refused by a rung, a limit or the pool, by error code.', ['code'] as const),
    // Every API answer a route or a guard wrote, by surface, status and error code ("" for a
    // success): the message path's error rate, an outage (db_unavailable) or a bug (internal) in one
    // family. Not counted: requests node's HTTP parser refuses before any route sees them.
    httpResponses: counter(
      'queen_http_responses_total',
      'API answers by surface (kv, timers, transaction, log, system, probe, other), HTTP status and error code ("" for a success).',
      ['surface', 'status', 'code'] as const,
    ),
    kvPoolInUse: gauge('queen_kv_pool_in_use', 'Connections of the dedicated KV pool checked out now.'),
    kvPoolWaiting: gauge('queen_kv_pool_waiting', 'Requests waiting for a connection of the dedicated KV pool.'),
    // The message log (API): how many one-item pushes each push statement to a partition carried
    // (services/api/push/coalescer.ts): 1 is a push that went alone; more is group commit at work.
    logPushGathering: new client.Histogram({
      name: 'queen_log_push_gathering_size',
      help: 'One-item pushes per push statement to a partition: 1 went alone, more were committed together (group commit).',
      buckets: [1, 2, 4, 8, 16, 32, 64, 100],
      registers: r,
    }),
    // The message path's latency (API): push, pop, ack and the transaction wire, from the body read to
    // the answer, refusals included. A long poll (pop with wait=true) waits for a message by design,
    // so it is its own route (pop_wait) and its time says how long consumers sat idle, not how slow
    // the cell is. The route set is closed (LOG_ROUTES): no queue, partition or tenant as a label.
    logDuration: new client.Histogram<'route'>({
      name: 'queen_log_request_duration_seconds',
      help: 'Time to answer one push, pop, ack or transaction-wire request, from routing to the response, by route (push, pop, pop_wait, ack, ack_batch, transaction, consumer_group_delete, trace).',
      labelNames: ['route'],
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      registers: r,
    }),
    // Rate limits (API): the cell's buckets are shared through PostgreSQL (services/api/rate/store.ts).
    rateStoreFallback: gauge('queen_kv_rate_store_fallback', 'Rate limits: 1 while this process cannot reach the shared buckets and enforces its local share (1/processes), else 0.', [], 'max'),
    rateLeaseAsks: counter('queen_kv_rate_lease_asks_total', 'Rate limits: token asks a worker sent its primary (each one a statement on the shared buckets); under a flood about four a second per bucket and worker, never one a request.'),
    rateProcesses: gauge('queen_kv_rate_processes', 'Rate limits: API processes of the cell sharing the buckets, as this process last saw them.', [], 'max'),
    // Timers the API takes and cancels (the sweeper fires them: queen_timers_fired_total is its).
    timersScheduled: counter('queen_timers_scheduled_total', 'Timer schedules and reschedules accepted (billed: the promise, not the delivery).'),
    timersCancelled: counter('queen_timers_cancelled_total', 'Timers cancelled before they fired.'),
    // Kill switches (1 = on, 0 = paused), as this process sees them: all three.
    switchState: switchGauge(gauge),
  };
}

/** The sweeper's families: the log's state and retention, the prune, the fire, its own cycles, the timersFire switch. */
export function createSweeperMetrics(register = new client.Registry()) {
  const { r, counter, gauge, reading } = makers(register);
  return {
    register,
    // The log's state (sweeper, sql/functions/log_gauges.sql), read on its own slower cadence
    // (services/sweeper/sweeper.ts LOG_GAUGE_INTERVAL_MS). Cell-wide figures, no names: a queue or
    // tenant label would grow with the cell; docs/runbook.md has the query that names the queues.
    // Unlike the other gauges they have no sample until a reading: a 0 served between a sweeper's
    // boot and its first cycle would be a backlog that vanished and came back (a false step for
    // deriv() and offset rules at every rollout).
    logBacklog: reading('queen_log_backlog_messages', 'Messages not yet finished (completed or dead-lettered), summed over every consumer group of every queue; a queue no group has popped counts once.'),
    logBacklogMaxGroup: reading('queen_log_backlog_max_group_messages', 'The largest backlog of any one consumer group on one queue (the worst group, unnamed).'),
    logOldestUnconsumed: reading('queen_log_oldest_unconsumed_age_seconds', 'Age of the oldest message some consumer group has not finished, in seconds (0 when none).'),
    logDeadLetters: reading('queen_log_dead_letters', 'Messages set aside as dead letters (per consumer group) and still stored.'),
    // The log's retention (sweeper, sql/functions/retention.sql). Removals are counted per queue, as
    // operators size retention per queue; the tenant and queue labels grow with the queues that had
    // something removed (not with traffic), which is the one place this registry accepts names.
    logRetentionRemoved: counter('queen_log_retention_removed_messages_total', 'Messages the log retention removed, by tenant and queue.', ['tenant', 'queue'] as const),
    logRetentionRemovedBytes: counter('queen_log_retention_removed_bytes_total', 'Payload bytes (as stored) of the messages the log retention removed, by tenant and queue.', ['tenant', 'queue'] as const),
    logRetentionRemovedUnfinished: counter('queen_log_retention_removed_unfinished_total', 'Removed messages some consumer group had not finished (retentionSeconds, ttl, maxWaitTimeSeconds or the cell default reached them first).'),
    logRetentionRemovedGroups: counter('queen_log_retention_removed_group_rows_total', 'Consumer-group rows (a group\'s cursor in one partition) the log retention removed as stale: nothing retained unfinished by them, no lease, idle past the queue\'s retention.'),
    logRetentionRemovedPartitions: counter('queen_log_retention_removed_partitions_total', 'Partitions the log retention removed because they held no message and no consumer-group row.'),
    logSettledPartitions: counter('queen_log_settled_partitions_total', 'Partitions the sweeper settled: every consumer group of the queue had finished them, so pops pass them over until a message or a group arrives.'),
    logOldestMessage: reading('queen_log_oldest_message_age_seconds', 'Age of the oldest message still stored in the log, in seconds (0 when the log is empty).'),
    logTableBytes: gauge('queen_log_table_bytes', 'Size on disk of a log table with its indexes and TOAST, in bytes.', ['table'] as const, 'max'),
    logRetentionDefault: gauge('queen_log_retention_default_seconds', 'The cell default retention (QUEEN_LOG_RETENTION_SECONDS) this sweeper applies; 0 keeps queues without their own forever.', [], 'max'),
    // Prune (sweeper)
    kvExpiredNotPruned: gauge('queen_kv_expired_not_pruned', 'Rows past their expiry still physically present (invisible to reads).', [], 'max'),
    kvExpiryLag: gauge('queen_kv_expiry_lag_seconds', 'Age of the oldest expired row not yet pruned, in seconds.', [], 'max'),
    kvPruned: counter('queen_kv_pruned_total', 'Expired rows deleted by the sweeper.'),
    // Timers (the API counts what it schedules and cancels)
    timersFired: counter('queen_timers_fired_total', 'Timers fired into the log.'),
    timersDue: gauge('queen_timers_due', 'Timers whose deliverAt has passed and that have not fired yet.', [], 'max'),
    timersOldestLate: gauge('queen_timers_oldest_late_seconds', 'How late the oldest due timer is, in seconds (0 when none is due).', [], 'max'),
    // Sweeper
    sweeperCycles: counter('queen_sweeper_cycles_total', 'Sweeper cycles completed.'),
    sweeperCycleSeconds: new client.Histogram<'phase'>({
      name: 'queen_sweeper_cycle_seconds',
      help: 'Time spent per sweeper phase (fire, prune, retain: the log retention of the claimed shards, usage: one slice of the usage rollup, cycle).',
      labelNames: ['phase'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: r,
    }),
    sweeperBatchSize: gauge('queen_sweeper_batch_size', 'The batch size the sweeper uses now (it shrinks under pressure).', [], 'max'),
    sweeperPhaseSuspended: gauge('queen_sweeper_phase_suspended', 'Phases the sweeper has suspended under pressure: 1 suspended, 0 running.', ['phase'] as const, 'max'),
    // The one kill switch the sweeper reads (timersFire), as it last read it.
    switchState: switchGauge(gauge),
  };
}

export type ApiMetrics = ReturnType<typeof createApiMetrics>;
export type SweeperMetrics = ReturnType<typeof createSweeperMetrics>;

/** The routes of queen_log_request_duration_seconds: a closed set, every one primed at boot. */
export const LOG_ROUTES = ['push', 'pop', 'pop_wait', 'ack', 'ack_batch', 'transaction', 'consumer_group_delete', 'trace'] as const;
export type LogRoute = (typeof LOG_ROUTES)[number];
/** The routes of queen_kv_op_duration_seconds (routes/kv.ts). */
export const KV_ROUTES = ['batch', 'get', 'put', 'delete'] as const;

/** Zero every labelled series we know of, so the families show values from the first scrape. */
export function primeApiMetrics(m: ApiMetrics): void {
  for (const s of ['kv', 'timersSchedule', 'timersFire']) m.switchState.set({ switch: s }, 1);
  for (const op of KV_OPS) m.kvOps.inc({ op, outcome: 'ok' }, 0);
  m.kvRefusals.inc({ code: 'rate_limited' }, 0);
  m.kvRefusals.inc({ code: 'kv_unavailable' }, 0);
  // Histograms too: a labelled histogram has no series until its first observation, so a latency
  // panel was empty and a rule on it could not fire after a restart.
  for (const route of KV_ROUTES) m.kvDuration.zero({ route });
  for (const route of LOG_ROUTES) m.logDuration.zero({ route });
}

export function primeSweeperMetrics(m: SweeperMetrics): void {
  m.switchState.set({ switch: 'timersFire' }, 1);
  for (const p of ['prune', 'usage', 'fire']) m.sweeperPhaseSuspended.set({ phase: p }, 0);
}
