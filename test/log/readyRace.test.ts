// Settling under traffic: a sweeper settles partitions (queen.log_settle_ready_v1) every few tens of
// milliseconds while pushes keep waking them, a group drains them, and a second group arrives
// mid-way (its registration racing the settling), to find one partition no push reaches again
// already settled. When the pushes stop, both groups must pop every message pushed: a partition
// settled while a message was landing in it, or while a group was registering, would leave
// messages no pop reads. Bounded: about 3 s of traffic (at most 19 s with its pauses), drained
// within 40 s of the start; the sweeper's own count says settling went on in both halves.
import { useApi } from '../support/api';
import { startTestSweeper } from '../support/sweeper';
import { call } from '../support/http';
import { ackOf, pop, push } from './helpers';

const api = useApi();
const QUEUE = 'race';
const PARTITIONS = 12;

/** Pops (batches of 10) and acks for `group` until `stop()` says so; answers the transactionIds popped. */
async function consume(group: string, stop: () => boolean, seen: Set<string>): Promise<void> {
  while (!stop()) {
    const got = await pop(api.url, QUEUE, { consumerGroup: group, batch: 10 });
    if (got.length === 0) {
      await new Promise((r) => setTimeout(r, 5));
      continue;
    }
    for (const m of got) seen.add(m.transactionId);
    expect((await call(api.url, 'POST', '/api/v1/ack/batch', { acknowledgments: got.map((m) => ackOf(m)) })).status).toBe(200);
  }
}

test('no message is left unread while the sweeper settles partitions under pushes, pops and a new group', async () => {
  const sweeper = startTestSweeper(api.databaseUrl, { intervalMs: 5 });
  const settled = async () => (await sweeper.metrics.register.getSingleMetric('queen_log_settled_partitions_total')!.get()).values[0]?.value ?? 0;
  try {
    // A partition no pusher reaches again: settled before the second group arrives, it is read by
    // that group only because its registration makes it ready.
    const pushed = ['quiet-1', 'quiet-2'];
    expect((await push(api.url, pushed.map((transactionId) => ({ queue: QUEUE, partition: 'quiet', transactionId, payload: 0 })))).status).toBe(201);
    let pushing = true;
    let paused = false;
    const pusher = async (who: number) => {
      for (let i = 0; pushing; i++) {
        if (paused) {
          await new Promise((r) => setTimeout(r, 20));
          continue;
        }
        const transactionId = `r${who}-${i}`;
        const partition = `p${(i * 7 + who) % PARTITIONS}`;
        const res = await push(api.url, [{ queue: QUEUE, partition, transactionId, payload: i }]);
        expect(res.status).toBe(201);
        pushed.push(transactionId);
        // Bursts and pauses, so partitions are drained and settled between their messages.
        if (i % 3 === 2) await new Promise((r) => setTimeout(r, 60));
      }
    };
    const early = new Set<string>();
    const late = new Set<string>();
    const deadline = Date.now() + 40_000;
    const allOf = (seen: Set<string>) => !pushing && pushed.every((id) => seen.has(id));
    const doneOrLate = (seen: Set<string>) => () => allOf(seen) || Date.now() > deadline;
    const pushers = [pusher(0), pusher(1)];
    const first = consume('early', doneOrLate(early), early);
    // Each half lasts 1.5 s; then, on a machine too busy for the consumers to catch up, the pushes
    // pause (up to 8 s) until the sweeper has settled something in that half.
    const settledSince = async (n: number) => {
      const until = Date.now() + 8_000;
      await new Promise((r) => setTimeout(r, 1_500));
      paused = true;
      while ((await settled()) <= n && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
      paused = false;
      return settled();
    };
    const settledBefore = await settledSince(0);
    const second = consume('late', doneOrLate(late), late);
    const settledDuring = await settledSince(settledBefore);
    pushing = false;
    await Promise.all(pushers);
    await Promise.all([first, second]);
    expect(pushed.length).toBeGreaterThan(50);
    expect(pushed.filter((id) => !early.has(id))).toEqual([]);
    expect(pushed.filter((id) => !late.has(id))).toEqual([]);
    expect(settledBefore).toBeGreaterThan(0);
    expect(settledDuring).toBeGreaterThan(settledBefore);
  } finally {
    await sweeper.close();
  }
}, 90_000);
