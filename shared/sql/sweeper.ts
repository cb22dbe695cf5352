// The statements the sweeper sends. Named; every rule is in sql/031 (queen.sweeper_pass_v1 claims,
// fires, prunes and marks in one transaction).

/** One pass: $1 cycle start (null on a cycle's first pass), $2 who, $3 shards, $4 fire batch, $5 prune batch, $6 prune on. */
export const SWEEPER_PASS = {
  name: 'sweeper_pass_v1',
  text: `SELECT queen.sweeper_pass_v1($1::timestamptz, $2::text, $3::int, $4::int, $5::int, $6::boolean) AS pass`,
};

export const SWEEPER_GAUGES = {
  name: 'sweeper_gauges_v1',
  text: `SELECT queen.sweeper_gauges_v1() AS gauges`,
};

export const KV_USAGE_ROLLUP = {
  name: 'kv_usage_rollup_v1',
  text: `SELECT queen.kv_usage_rollup_v1() AS tenants`,
};

/** The message log's gauges (sql/040_broker_gauges.sql): backlog, worst group, oldest unfinished age, dead letters. */
export const LOG_GAUGES = {
  name: 'log_gauges_v1',
  text: `SELECT queen.log_gauges_v1() AS gauges`,
};
