// The lock order of the cell, in one place. A transaction that touches more than one lock space
// takes them in this order and no other, so two such transactions can never wait on each other in
// a circle:
//   1. kv          queen.kv rows, in ascending (namespace, key) COLLATE "C" order (kv_apply_v1)
//   2. timers      queen.log_timers rows (the timers surface and the sweeper's fire)
//   3. partitions  queen.partitions rows (push), then queen.partition_consumers rows (ack), each in
//                  ascending order (log_apply_v1)
// Within a space, the SQL procedure that owns it sorts its own rows. The sweeper's fire takes
// timers, then partitions (queen.log_lock_partition_v1, as a push does), which is this order too.
// The transaction wire goes through it with `lockOrderedStatement`: its steps are SQL expressions
// chained in one statement, because its commit is the hot path.

export const LOCK_SPACES = ['kv', 'timers', 'partitions'] as const;
export type LockSpace = (typeof LOCK_SPACES)[number];

export interface NamedStatement {
  name: string;
  text: string;
}

/**
 * The same order as ONE statement (one round trip, one implicit transaction): each present space's
 * jsonb expression, in LOCK_SPACES order, as a chain of MATERIALIZED CTEs in which every step reads
 * the previous step's result. That data dependency, not a hope about evaluation order, is what makes
 * PostgreSQL run them in order. A step answers an array; a JSON object is a verdict that ends the
 * transaction's work (a lost `required`, whose own writes are already undone): the steps after it
 * do not run, so nothing is written, and the object comes back in its space's column. `args` is a
 * select list naming the statement's parameters once (`$1::uuid AS tenant, ...`); the expressions
 * read them as `a.<name>`. Columns come back as text,
 * named after their space. Built once per combination of spaces (callers cache it by name).
 */
export function lockOrderedStatement(prefix: string, args: string, exprs: Partial<Record<LockSpace, string>>): NamedStatement {
  const present = LOCK_SPACES.filter((space) => exprs[space] !== undefined);
  if (present.length === 0) throw new Error('lockOrderedStatement needs at least one lock space.');
  const ctes = present.map((space, i) =>
    i === 0
      ? `s_${space} AS MATERIALIZED (SELECT (${exprs[space]}) AS r FROM a)`
      : `s_${space} AS MATERIALIZED (SELECT CASE WHEN p.r IS NULL OR jsonb_typeof(p.r) = 'object' THEN NULL ELSE (${exprs[space]}) END AS r FROM a, s_${present[i - 1]} p)`,
  );
  return {
    name: `${prefix}_${present.join('_')}`,
    text:
      `WITH a AS MATERIALIZED (SELECT ${args}),\n  ${ctes.join(',\n  ')}\n` +
      `SELECT ${present.map((space) => `s_${space}.r::text AS ${space}`).join(', ')} FROM ${present.map((space) => `s_${space}`).join(', ')}`,
  };
}
