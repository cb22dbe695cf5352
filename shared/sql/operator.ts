// The statements behind the operator's reads and actions (services/api/routes/operator.ts); every
// rule is in sql/functions/operator.sql. Each answers one jsonb text, `body`.

const call = (name: string, fn: string, args: string) => ({
  name,
  text: `SELECT queen.${fn}(${args})::text AS body`,
});

export const OPERATOR_QUEUES = call('operator_queues_v1', 'operator_queues_v1', '$1::uuid, $2::text, $3::int');
export const OPERATOR_PARTITIONS = call('operator_partitions_v1', 'operator_partitions_v1', '$1::uuid, $2::text, $3::text, $4::int');
export const OPERATOR_MESSAGES = call('operator_messages_v1', 'operator_messages_v1', '$1::uuid, $2::text, $3::text, $4::text, $5::bigint, $6::int');
export const OPERATOR_MESSAGE = call('operator_message_v1', 'operator_message_v1', '$1::uuid, $2::text, $3::text');
export const OPERATOR_TIMERS = call('operator_timers_v1', 'operator_timers_v1', '$1::uuid, $2::text, $3::text, $4::int, $5::text, $6::int');
export const OPERATOR_KV_KEYS = call('operator_kv_keys_v1', 'operator_kv_keys_v1', '$1::uuid, $2::text, $3::text, $4::text, $5::int');
export const OPERATOR_KV_KEY = call('operator_kv_key_v1', 'operator_kv_key_v1', '$1::uuid, $2::text, $3::text');
export const OPERATOR_TENANTS = call('operator_tenants_v1', 'operator_tenants_v1', '$1::uuid, $2::uuid, $3::int');

/** $2 is 'requeue' or 'discard'. */
export const OPERATOR_DEAD_LETTER = call('operator_dead_letter_v1', 'operator_dead_letter_v1', '$1::uuid, $2::text, $3::text, $4::text, $5::text');
export const OPERATOR_DEAD_LETTERS = call('operator_dead_letters_v1', 'operator_dead_letters_v1', '$1::uuid, $2::text, $3::text, $4::text, $5::int');
/** $2 is 'cancel' or 'reschedule'; $4 the body (deliverAt or delaySeconds) or NULL. */
export const OPERATOR_TIMER = call('operator_timer_v1', 'operator_timer_v1', '$1::uuid, $2::text, $3::text, $4::jsonb');
export const OPERATOR_KV_DELETE = call('operator_kv_delete_v1', 'operator_kv_delete_v1', '$1::uuid, $2::text, $3::text');
export const OPERATOR_SKIP = call('operator_skip_v1', 'operator_skip_v1', '$1::uuid, $2::text, $3::text, $4::text');

/** The console's overview: the sweepers' rungs, the throughput, timers due and late, connections ($1 late seconds or NULL). */
export const OPERATOR_OVERVIEW = call('operator_overview_v1', 'operator_overview_v1', '$1::int');

/** The console's sign-in limit, per cell: $1 the peer address, $2 a wrong token given, $3 the limit, $4 the window in seconds. */
export const CONSOLE_LOGIN = call('console_login_v1', 'console_login_v1', '$1::text, $2::boolean, $3::int, $4::int');
