// At three times the rate limit, the admitted operations stay within 10% of the limit and every
// other call is 429 rate_limited with Retry-After. This asserts a count against the limit the
// bucket promises, not the speed of the machine: the offered load is paced by the test.
import { call } from '../support/http';
import { useApi } from '../support/api';
import { elapse } from '../support/wait';

const RATE = 10;
const BURST = 2;
const OFFERED = 3 * RATE;
const SECONDS = 6;

// The pool is out of this test's way (it is about the bucket): on a busy machine an admitted read
// must wait for a connection rather than become a 503.
const api = useApi({
  QUEEN_KV_READS_PER_SEC: String(RATE),
  QUEEN_KV_READS_BURST: String(BURST),
  QUEEN_KV_POOL_SIZE: '8',
  QUEEN_KV_ACQUIRE_TIMEOUT_MS: '30000',
});

test('three times the read limit: admitted within 10% of the limit, the rest 429 with Retry-After', async () => {
  // The server's own clock: the instant each call reached this worker (preflight is the first thing
  // the KV routes run). The test process shares its event loop with the server, so when the
  // machine is busy the sender stalls; the limit is judged on the instants the server saw.
  const { guards } = api.server.ops;
  const arrivals: number[] = [];
  const preflight = guards.preflight.bind(guards);
  guards.preflight = (req, res, kind) => {
    if (req.url?.startsWith('/api/v1/kv/load/')) arrivals.push(performance.now());
    return preflight(req, res, kind);
  };

  const total = OFFERED * SECONDS;
  const gapMs = 1000 / OFFERED;
  const answers: Promise<{ status: number; retryAfter: string | null; error?: string }>[] = [];
  const started = performance.now();
  for (let i = 0; i < total; i++) {
    const wait = started + i * gapMs - performance.now();
    if (wait > 1) await elapse(wait); // the pace of the offered load
    answers.push(
      call(api.url, 'GET', `/api/v1/kv/load/k${i % 10}`).then((r) => ({ status: r.status, retryAfter: r.headers.get('retry-after'), error: r.body?.error })),
    );
  }
  const results = await Promise.all(answers);
  guards.preflight = preflight;

  expect(arrivals).toHaveLength(total);
  const window = (arrivals[arrivals.length - 1] - arrivals[0]) / 1000;
  // The load the server saw really was well above the limit.
  expect(total / window).toBeGreaterThan(2 * RATE);

  const admitted = results.filter((r) => r.status === 200).length;
  // Never more than the bucket allows over that window: the burst plus the rate.
  expect(admitted).toBeLessThanOrEqual(Math.ceil(1.1 * (BURST + RATE * window)));
  // And not less than what a bucket of this rate and burst admits for these arrival instants.
  let tokens = BURST;
  let last = arrivals[0];
  let allowed = 0;
  for (const t of arrivals) {
    tokens = Math.min(BURST, tokens + ((t - last) / 1000) * RATE);
    last = t;
    if (tokens >= 1) {
      tokens -= 1;
      allowed++;
    }
  }
  expect(admitted).toBeGreaterThanOrEqual(Math.floor(0.9 * allowed));
  expect(admitted).toBeLessThanOrEqual(Math.ceil(1.1 * allowed));

  for (const r of results.filter((x) => x.status !== 200)) {
    expect(r.status).toBe(429);
    expect(r.error).toBe('rate_limited');
    expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
  }
});
