// The cell on a real Patroni cluster (test/ha/cluster.ts: three PostgreSQL nodes, synchronous_mode,
// HAProxy routing to the primary by Patroni's REST check), under load, while the primary's machine
// is lost (every process of the node SIGKILLed) and then in a planned switchover. Nothing
// acknowledged is lost, no push is stored twice, every refusal meanwhile is a 503 with
// Retry-After, every once-marker bundle's marker and ack committed together, a second tenant flooding
// its KV read limit is held to it throughout, and the cell serves again by itself (same processes)
// once a new primary is up.
import { HaCluster, MISSING, PatroniNode, startHaCluster } from './cluster';
import { waitFor } from '../support/wait';
import { Cell, failoverUnderLoad, startCell, Verdict } from './failover';

function expectClean(v: Verdict, cluster: HaCluster) {
  const shown = JSON.stringify({ ...v, badRefusals: v.badRefusals.slice(0, 5), refusalsMisnamed: v.refusalsMisnamed.slice(0, 5), flood: { ...v.flood, badAnswers: v.flood.badAnswers.slice(0, 5) } });
  try {
    expect(v.putsAcknowledged).toBeGreaterThan(0);
    expect(v.pushesAcknowledged).toBeGreaterThan(0);
    expect(v.timersAcknowledged).toBeGreaterThan(0);
    expect(v.bundlesAcknowledged).toBeGreaterThan(0);
    // The consumer's once-marker bundles: the marker and the ack committed together or not at all.
    expect(v.onceAnomalies).toBe(0);
    expect({ putsLost: v.putsLost, pushesLost: v.pushesLost, pushesDoubled: v.pushesDoubled, timersLost: v.timersLost, timersDoubled: v.timersDoubled, timersEarly: v.timersEarly })
      .toEqual({ putsLost: 0, pushesLost: 0, pushesDoubled: 0, timersLost: 0, timersDoubled: 0, timersEarly: 0 });
    expect(v.badRefusals).toEqual([]);
    // The database's state, named as such (db_unavailable); a call on the KV's dedicated pool may
    // meet its acquire timeout first (kv_unavailable, timers_unavailable), all retryable 503s.
    expect(v.refusalsMisnamed.slice(0, 5)).toEqual([]);
    expect({ hangs: v.hangs, socketErrors: v.socketErrors, processesKept: v.processesKept }).toEqual({ hangs: 0, socketErrors: 0, processesKept: true });
    expect(v.servingAgainMs).toBeDefined();
    // The counts above were read from a primary, not from a node left behind.
    expect(v.readFrom.inRecovery).toBe(false);
    // The switches', the push wake-ups' and the sweeper's LISTEN connections found the new primary.
    expect(v.listenersNotRestored).toEqual([]);
    // A failover is the cell's state, not a bug: warnings, no error line (the sweeper logged one a second).
    expect(v.errorLines.map((l) => l.msg)).toEqual([]);
    // The rate-limited tenant: every answer admitted, 429 rate_limited or 503, each refusal with
    // Retry-After; admitted within the bound docs/limits.md states across a failover; and still
    // limited once the cell serves again on the new primary (whose buckets started empty).
    expect({ badAnswers: v.flood.badAnswers.slice(0, 5), hangs: v.flood.hangs }).toEqual({ badAnswers: [], hangs: 0 });
    expect(v.flood.admitted).toBeGreaterThan(0);
    expect(v.flood.admitted).toBeLessThanOrEqual(v.flood.bound);
    expect(v.flood.limitedAfter).toBeGreaterThan(0);
  } catch (err) {
    (err as Error).message += `\nverdict: ${shown}\n${cluster.output().slice(-4000)}`;
    throw err;
  }
}

const reason = MISSING;
// Said on stderr too: jest shows neither a skipped suite's title (but in a verbose or JSON report) nor its console.
if (reason) process.stderr.write(`test/ha/failover.test.ts: not run: ${reason}\n`);
(reason ? describe.skip : describe)(reason ? `failover on Patroni: not run, ${reason}` : 'failover on Patroni (3 nodes, synchronous_mode, HAProxy)', () => {
  let cluster: HaCluster;
  let cell: Cell;

  beforeAll(async () => {
    cluster = await startHaCluster({ nodes: 3 });
    cell = await startCell(cluster);
  }, 120_000);

  afterAll(async () => {
    try {
      await cell?.stop();
    } finally {
      await cluster?.stop();
    }
  }, 60_000);

  test('the primary machine is lost (SIGKILL): nothing acknowledged lost, refusals 503 with Retry-After, serving again by itself', async () => {
    const old = await cluster.untilPrimary();
    const v = await failoverUnderLoad(cluster, cell, 'kill', async () => {
      cluster.kill(old);
      await cluster.untilPrimary(old);
    });
    process.stderr.write(`failover (kill): ${JSON.stringify({ ...v, badRefusals: v.badRefusals.length, refusalsMisnamed: v.refusalsMisnamed.length, errorLines: v.errorLines.map((l) => l.msg), flood: { ...v.flood, badAnswers: v.flood.badAnswers.length } })}\n`);
    expectClean(v, cluster);
    expect(v.servingAgainMs!).toBeLessThan(30_000);
    // The machine was lost: the LISTEN connections held from boot were cut with it (and came back, above).
    expect(v.listenersLost).toEqual(expect.arrayContaining(['api:switches', 'sweeper:sweeper']));
  }, 120_000);

  test('a planned switchover: the same', async () => {
    const leader = await cluster.untilPrimary();
    // In synchronous_mode Patroni switches over only to the synchronous standby.
    let candidate: PatroniNode | undefined;
    await waitFor(async () => (candidate = await cluster.syncStandby()) !== undefined, { what: 'a synchronous standby', timeoutMs: 30_000, everyMs: 200 });
    const v = await failoverUnderLoad(cluster, cell, 'switchover', async () => {
      await cluster.switchover(leader, candidate!);
      await cluster.untilPrimary(leader);
    });
    process.stderr.write(`failover (switchover): ${JSON.stringify({ ...v, badRefusals: v.badRefusals.length, refusalsMisnamed: v.refusalsMisnamed.length, errorLines: v.errorLines.map((l) => l.msg), flood: { ...v.flood, badAnswers: v.flood.badAnswers.length } })}\n`);
    expectClean(v, cluster);
  }, 120_000);
});
