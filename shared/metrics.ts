// The Prometheus families, registered once per process and present from boot (an alert can be
// written before the first key). Label sets are small and closed: op, outcome, code, phase.
import client from 'prom-client';

export function createMetrics(register = new client.Registry()) {
  const kvOps = new client.Counter({
    name: 'queen_kv_ops_total',
    help: 'KV operations answered, by op and outcome (ok, precondition, refused, error).',
    labelNames: ['op', 'outcome'] as const,
    registers: [register],
  });
  const kvDuration = new client.Histogram({
    name: 'queen_kv_op_duration_seconds',
    help: 'Time to answer one KV request, from the first byte of its body to the response.',
    labelNames: ['route'] as const,
    buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
    registers: [register],
  });
  const kvRefusals = new client.Counter({
    name: 'queen_kv_refusals_total',
    help: 'KV requests refused, by error code.',
    labelNames: ['code'] as const,
    registers: [register],
  });
  return { register, kvOps, kvDuration, kvRefusals };
}

export type Metrics = ReturnType<typeof createMetrics>;
