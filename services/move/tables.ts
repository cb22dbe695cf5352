// Which of the cell's tables a tenant move carries (services/move/move.ts), and why the others stay.
// Every table of the queen schema is in exactly one of the two lists: test/scaling/move.test.ts reads
// the catalog and fails on a table in neither, so a table added later is placed here, on purpose,
// before a move can run on a schema that has it.
//
// A moved table's rows are found through the tenant: directly (tenant_id), through its queues
// (queue_id), its partitions (partition_id) or its timers (timer_id). Every id the cell makes is a
// random UUID, so the rows keep their ids on the target and never meet another tenant's there.

const QUEUES = 'SELECT q.id FROM queen.queues q WHERE q.tenant_id = $1';
const PARTITIONS = 'SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.tenant_id = $1';
const TIMERS = 'SELECT l.timer_id FROM queen.log_timers l WHERE l.tenant_id = $1';

export interface MovedTable {
  table: string;
  /** The tenant's rows: a condition on the table as `t`, the tenant as $1. */
  scope: string;
}

const byTenant = (table: string): MovedTable => ({ table, scope: 't.tenant_id = $1' });
const byQueue = (table: string): MovedTable => ({ table, scope: `t.queue_id IN (${QUEUES})` });
const byPartition = (table: string): MovedTable => ({ table, scope: `t.partition_id IN (${PARTITIONS})` });

/** The tables a move copies, parents before children (the copy's order; the removal runs it backwards). */
export const MOVED_TABLES: readonly MovedTable[] = [
  byTenant('queues'),
  byQueue('queue_options'),
  byQueue('queue_delays'),
  byQueue('queue_retention'),
  byQueue('consumer_groups'),
  byQueue('partitions'),
  byPartition('messages'),
  byPartition('sealed_messages'),
  byPartition('message_traces'),
  byPartition('partition_consumers'),
  byPartition('consumer_retry_at'),
  byPartition('shared_leases'),
  byPartition('message_failures'),
  byPartition('message_failure_texts'),
  byTenant('kv'),
  byTenant('kv_quota'),
  byTenant('kv_usage'),
  byTenant('log_timers'),
  { table: 'sealed_timers', scope: `t.timer_id IN (${TIMERS})` },
];

/** The tables a move leaves where they are, each with the reason. */
export const CELL_TABLES: Readonly<Record<string, string>> = {
  kv_rate_bucket: "the cell's token buckets (by tenant): the target's start full, so the tenant may spend one burst more",
  kv_rate_process: "the cell's rate-limiting processes",
  kv_usage_layout: "the rollup's slicing of the cell's own heap",
  kv_usage_slice: "the rollup's slicing of the cell's own heap",
  kv_usage_part: "the rollup's counts of the source's heap pages: each cell's rollup recounts its own slices, the moved rows in the target's and their absence in the source's",
  kv_usage_recent: 'as kv_usage_part',
  kv_usage_total: 'the sum of kv_usage_part',
  schema_definitions: "the cell's schema",
  schema_migrations: "the cell's schema",
  sweeper_shards: "the cell's sweepers",
  system_state: "the cell's kill switches",
  tenant_moves: "the move's own bookkeeping, one row per cell",
};
