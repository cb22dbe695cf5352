// npm run chaos:failover: the cell (built API, one worker, and a sweeper) on a three-node Patroni
// cluster (synchronous_mode, HAProxy routing to the primary by Patroni's REST check; test/ha/cluster.ts)
// under four writers of KV puts, pushes with transactionIds and timers with timerKeys (1 s ahead), each
// retried until acknowledged, and a consumer settling the pushes with once-marker bundles (a KV
// putIfAbsent marker and the ack in one transaction),
// through three faults in a row: the primary's machine lost (every process SIGKILLed), a planned
// switchover, and the primary frozen (SIGSTOP) until a standby is promoted, then thawed so that it
// comes back beside the new primary. Prints, per run, what was acknowledged and what the new primary
// lacks (lost) or holds twice (doubled), the once-marker bundles and their anomalies (an ack without
// its marker or a marker without its ack), the refusals by code, hangs past the call's bound, the time
// from the fault until the cell serves again, and whether its processes are the ones started before.
// Exit 1 when any count that must be 0 is not.
import { MISSING, PatroniNode, startHaCluster } from '../test/ha/cluster';
import { failoverUnderLoad, startCell, Verdict } from '../test/ha/failover';
import { waitFor } from '../test/support/wait';

async function main(): Promise<void> {
  if (MISSING) {
    process.stdout.write(`chaos:failover not run: ${MISSING}\n`);
    process.exit(2);
  }
  const cluster = await startHaCluster({ nodes: 3 });
  const verdicts: Verdict[] = [];
  let cell: Awaited<ReturnType<typeof startCell>> | undefined;
  try {
    cell = await startCell(cluster);
    const run = async (name: string, fault: () => Promise<void>) => {
      const v = await failoverUnderLoad(cluster, cell!, name, fault, { acksAfter: 100 });
      verdicts.push(v);
      process.stdout.write(`${JSON.stringify({ ...v, badRefusals: v.badRefusals.length, refusalsMisnamed: v.refusalsMisnamed.length, errorLines: v.errorLines.map((l) => l.msg), flood: { ...v.flood, badAnswers: v.flood.badAnswers.length } })}\n`);
    };
    const old = await cluster.untilPrimary();
    await run('kill', async () => {
      cluster.kill(old);
      await cluster.untilPrimary(old);
    });
    const leader = await cluster.untilPrimary();
    let sync: PatroniNode | undefined;
    await waitFor(async () => (sync = await cluster.syncStandby()) !== undefined, { what: 'a synchronous standby', timeoutMs: 60_000, everyMs: 200 });
    await run('switchover', async () => {
      await cluster.switchover(leader, sync!);
      await cluster.untilPrimary(leader);
    });
    const frozen = await cluster.untilPrimary();
    await waitFor(async () => (await cluster.syncStandby()) !== undefined, { what: 'a synchronous standby', timeoutMs: 60_000, everyMs: 200 });
    await run('sigstop', async () => {
      cluster.freeze(frozen);
      await cluster.untilPrimary(frozen);
      // Back beside the new primary: Patroni finds it lost the leader key and demotes it.
      cluster.thaw(frozen);
    });
  } finally {
    await cell?.stop().catch(() => undefined);
    await cluster.stop();
  }
  process.stdout.write('\nrun         acked puts/pushes/timers  lost  doubled  timers early  bundles/anomalies  refusals (all 503 + Retry-After)  hangs  serving again  same processes  flood admitted/bound, 429s after\n');
  for (const v of verdicts) {
    const allGood = v.badRefusals.length === 0 ? 'yes' : `no (${v.badRefusals.length})`;
    process.stdout.write(
      `${v.fault.padEnd(12)}${`${v.putsAcknowledged}/${v.pushesAcknowledged}/${v.timersAcknowledged}`.padEnd(26)}${String(v.putsLost + v.pushesLost + v.timersLost).padEnd(6)}${String(v.pushesDoubled + v.timersDoubled).padEnd(9)}${String(v.timersEarly).padEnd(14)}${`${v.bundlesAcknowledged}/${v.onceAnomalies}`.padEnd(19)}${`${v.refusals} (${allGood})`.padEnd(35)}${String(v.hangs).padEnd(7)}${`${((v.servingAgainMs ?? NaN) / 1000).toFixed(1)} s`.padEnd(15)}${(v.processesKept ? 'yes' : 'no').padEnd(16)}${v.flood.admitted}/${v.flood.bound}, ${v.flood.limitedAfter}\n`,
    );
  }
  const bad = verdicts.some((v) => v.putsLost + v.pushesLost + v.pushesDoubled + v.timersLost + v.timersDoubled + v.timersEarly + v.onceAnomalies + v.badRefusals.length + v.hangs + v.socketErrors > 0 || v.bundlesAcknowledged === 0 || !v.processesKept || v.servingAgainMs === undefined || v.servingAgainMs > 30_000 || v.flood.badAnswers.length + v.flood.hangs > 0 || v.flood.admitted > v.flood.bound || v.flood.limitedAfter === 0 || v.readFrom.inRecovery);
  process.exit(bad ? 1 : 0);
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
