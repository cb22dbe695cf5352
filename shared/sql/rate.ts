// The statement of the shared rate buckets (services/api/rate/store.ts): one batch of leases, sent by
// an API primary when its workers need tokens, and once a second as its heartbeat.
export const RATE_LEASE = {
  name: 'kv_rate_lease_v1',
  text: `SELECT queen.kv_rate_lease_v1($1::text, $2::jsonb)::text AS r`,
};
