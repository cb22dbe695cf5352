// Cluster-wide /metrics. Each worker keeps its own prom-client registry; a scrape lands on one
// worker, which asks the primary over IPC; the primary collects every listening worker's registry as
// JSON and merges them with prom-client's AggregatorRegistry.aggregate (counters and histograms
// summed, gauges by each family's `aggregator`), then answers the asking worker with the text.
//
// Why not AggregatorRegistry#clusterMetrics(): it counts a worker that dies mid-collection as
// pending until its fixed 5 s timeout and then fails the whole scrape, and it asks workers that are
// still booting (no listener yet). Here only workers that are listening are asked, and one that
// exits is dropped from the collection at once, so a scrape during a worker crash still answers.
import cluster, { Worker } from 'node:cluster';
import { AggregatorRegistry, Registry } from 'prom-client';
import type { Logger } from '../../shared/log';

/** The message types; prefixed so they never collide with other IPC (kill switches, prom-client's own). */
export const METRICS_IPC = {
  ask: 'queen:metrics:ask', // worker -> primary: I was scraped, send me the cluster's text
  collect: 'queen:metrics:collect', // primary -> worker: send your registry as JSON
  part: 'queen:metrics:part', // worker -> primary: here it is
  answer: 'queen:metrics:answer', // primary -> worker: the aggregated text, or an error
} as const;

type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

interface IpcMessage {
  type?: string;
  id?: number;
  metrics?: MetricsJson;
  text?: string;
  error?: string;
}

/** Well under Prometheus's default 10 s scrape timeout, so a failed scrape says why. */
const COLLECT_TIMEOUT_MS = 3000;

function send(worker: Worker, message: IpcMessage): void {
  if (!worker.isConnected()) return;
  // The channel can close between the check and the send (a worker dying); the callback swallows that.
  worker.send(message, (err: Error | null) => void err);
}

/**
 * Primary side. Returns a stop function for tests; main.ts installs it once and never stops it.
 */
export function installMetricsAggregation(log: Logger): () => void {
  const listening = new Set<number>();
  let nextCollect = 0;
  const collections = new Map<number, { waiting: Set<number>; parts: MetricsJson[]; finish(err?: Error): void }>();

  const onListening = (worker: Worker) => void listening.add(worker.id);
  const onExit = (worker: Worker) => {
    listening.delete(worker.id);
    for (const c of collections.values()) {
      if (c.waiting.delete(worker.id) && c.waiting.size === 0) c.finish();
    }
  };

  const collect = (): Promise<string> =>
    new Promise((resolve, reject) => {
      const id = nextCollect++;
      const waiting = new Set<number>();
      const parts: MetricsJson[] = [];
      const timer = setTimeout(() => finish(new Error(`workers ${[...waiting].join(', ')} did not send their metrics within ${COLLECT_TIMEOUT_MS} ms`)), COLLECT_TIMEOUT_MS);
      const finish = (err?: Error) => {
        if (!collections.delete(id)) return;
        clearTimeout(timer);
        if (err) return reject(err);
        AggregatorRegistry.aggregate(parts).metrics().then(resolve, reject);
      };
      collections.set(id, { waiting, parts, finish });
      for (const worker of Object.values(cluster.workers ?? {})) {
        if (worker && listening.has(worker.id) && worker.isConnected()) {
          waiting.add(worker.id);
          send(worker, { type: METRICS_IPC.collect, id });
        }
      }
      if (waiting.size === 0) finish();
    });

  const onMessage = (worker: Worker, message: IpcMessage) => {
    if (!message || typeof message !== 'object') return;
    if (message.type === METRICS_IPC.part && typeof message.id === 'number') {
      const c = collections.get(message.id);
      if (!c || !c.waiting.delete(worker.id)) return;
      if (Array.isArray(message.metrics)) c.parts.push(message.metrics);
      if (c.waiting.size === 0) c.finish();
    } else if (message.type === METRICS_IPC.ask && typeof message.id === 'number') {
      const asked = message.id;
      collect().then(
        (text) => send(worker, { type: METRICS_IPC.answer, id: asked, text }),
        (err: Error) => {
          log.warn({ err: { message: err.message } }, 'metrics: cluster collection failed; the scrape is answered 503');
          send(worker, { type: METRICS_IPC.answer, id: asked, error: err.message });
        },
      );
    }
  };

  cluster.on('listening', onListening);
  cluster.on('exit', onExit);
  cluster.on('message', onMessage);
  return () => {
    cluster.off('listening', onListening);
    cluster.off('exit', onExit);
    cluster.off('message', onMessage);
  };
}

/**
 * Worker side: answers the primary's collections from this worker's registry (after `refresh`, which
 * samples the gauges that are read rather than counted), and returns the function the /metrics route
 * calls to get the cluster's text. Must be installed before the server listens: the primary asks only
 * listening workers and counts on an answer.
 */
export function workerMetricsSource(register: Registry, refresh: () => void): () => Promise<string> {
  let nextAsk = 0;
  const asks = new Map<number, { resolve(text: string): void; reject(err: Error): void; timer: NodeJS.Timeout }>();

  process.on('message', (message: IpcMessage) => {
    if (!message || typeof message !== 'object') return;
    if (message.type === METRICS_IPC.collect) {
      refresh();
      register.getMetricsAsJSON().then(
        (metrics) => process.send?.({ type: METRICS_IPC.part, id: message.id, metrics }),
        () => process.send?.({ type: METRICS_IPC.part, id: message.id, metrics: [] }),
      );
    } else if (message.type === METRICS_IPC.answer && typeof message.id === 'number') {
      const ask = asks.get(message.id);
      if (!ask) return;
      asks.delete(message.id);
      clearTimeout(ask.timer);
      if (typeof message.text === 'string') ask.resolve(message.text);
      else ask.reject(new Error(message.error ?? 'the primary answered without metrics'));
    }
  });

  return () =>
    new Promise((resolve, reject) => {
      if (!process.send || !process.connected) return reject(new Error('this worker has lost its primary'));
      const id = nextAsk++;
      const timer = setTimeout(() => {
        asks.delete(id);
        reject(new Error('the primary did not answer the metrics request in time'));
      }, COLLECT_TIMEOUT_MS + 1000);
      asks.set(id, { resolve, reject, timer });
      process.send({ type: METRICS_IPC.ask, id });
    });
}
