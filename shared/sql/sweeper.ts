// The statements the sweeper sends. Named; every rule is in sql/functions/sweeper.sql (queen.sweeper_pass_v4 claims,
// fires, prunes and marks in one transaction).

/**
 * One pass: $1 cycle start (null on a cycle's first pass), $2 who, $3 shards, $4 fire batch, $5 prune
 * batch (also the log retention's, per shard), $6 prune on, $7 the cell's default log retention in seconds,
 * $8 how many fired timers' trace contexts to answer for the pass's span links (0 with tracing off: none).
 */
export const SWEEPER_PASS = {
  name: 'sweeper_pass_v4',
  text: `SELECT queen.sweeper_pass_v4($1::timestamptz, $2::text, $3::int, $4::int, $5::int, $6::boolean, $7::int, $8::int) AS pass`,
};

export const SWEEPER_GAUGES = {
  name: 'sweeper_gauges_v1',
  text: `SELECT queen.sweeper_gauges_v1() AS gauges`,
};

/**
 * The sweeper's report for the console's overview (sql/functions/operator.sql): $1 its id, $2 its
 * shedding state (null: it stops, its row goes), $3 how often, cell-wide, the log's counters are sampled.
 */
export const SWEEPER_REPORT = {
  name: 'sweeper_report_v1',
  text: `SELECT queen.sweeper_report_v1($1::text, $2::jsonb, $3::int) AS report`,
};

/**
 * One slice of the usage rollup (sql/functions/kv_usage.sql): $1 heap pages a slice (used when the layout is built),
 * $2 QUEEN_SWEEPER_USAGE_INTERVAL_MS (a slice is due once half of it old). Counts the slice counted
 * longest ago and publishes the sum into queen.kv_usage.
 */
export const KV_USAGE_ROLLUP = {
  name: 'kv_usage_rollup_v2',
  text: `SELECT queen.kv_usage_rollup_v2($1::int, make_interval(secs => $2::float8 / 1000)) AS slice`,
};

/** The log retention's gauges (sql/functions/retention.sql): the oldest retained message's age, the log tables' sizes. */
export const LOG_RETENTION_GAUGES = {
  name: 'log_retention_gauges_v1',
  text: `SELECT queen.log_retention_gauges_v1() AS gauges`,
};

/** The message log's gauges (sql/functions/log_gauges.sql): backlog, worst group, oldest unfinished age, dead letters. */
export const LOG_GAUGES = {
  name: 'log_gauges_v2',
  text: `SELECT queen.log_gauges_v2() AS gauges`,
};
