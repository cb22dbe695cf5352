// Traces (shared/tracing.ts): the API and the sweeper, spawned as an operator runs them with the
// standard OTEL_* variables, export over OTLP/HTTP to a collector this test runs on loopback. What
// is held: one server span per request named by its route template, one span per statement as
// its child, a caller's traceparent continued, the sweeper's cycles with their statements, and not
// one key, value, prefix, payload or namespace in any span name, attribute or resource. Off (no
// endpoint), nothing is exported and the processes say why.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, propagation, trace } from '@opentelemetry/api';
import { InMemorySpanExporter, NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { Queen, type Message } from '@queen-kv/client';
import { freePort } from '../../shared/embeddedPostgres';
import { spawnApi, spawnSweeper, untilHealthy, useSpawnedDatabase } from '../support/processes';
import { UNLIMITED_RATES } from '../support/api';
import { waitFor } from '../support/wait';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: Array<{ key: string; value: Record<string, unknown> }>;
  links?: Array<{ traceId: string; spanId: string; attributes?: unknown[] }>;
}
interface Exported {
  service: string;
  span: OtlpSpan;
  attrs: Record<string, unknown>;
}

/** An OTLP/HTTP JSON receiver: every span posted to /v1/traces, with its service's name. */
async function startCollector(): Promise<{ url: string; spans: Exported[]; bodies: string[]; close(): Promise<void> }> {
  const spans: Exported[] = [];
  const bodies: string[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      bodies.push(text);
      if (req.url === '/v1/traces') {
        const body = JSON.parse(text) as { resourceSpans: Array<{ resource: { attributes: OtlpSpan['attributes'] }; scopeSpans: Array<{ spans: OtlpSpan[] }> }> };
        for (const rs of body.resourceSpans) {
          const service = String(rs.resource.attributes?.find((a) => a.key === 'service.name')?.value.stringValue);
          for (const ss of rs.scopeSpans) {
            for (const span of ss.spans) {
              const attrs = Object.fromEntries((span.attributes ?? []).map((a) => [a.key, Object.values(a.value)[0]]));
              spans.push({ service, span, attrs });
            }
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    bodies,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

// What the calls below send; none of it may leave the database.
const SECRET = {
  ns: 'ns-7f3a91',
  key: 'key-c0ffee-42',
  value: 'value-d1e5e1-99',
  prefix: 'pref-b16b00',
  payload: 'payload-5eed-77',
  queue: 'orders-9q1',
  timerKey: 'timer-a11ce-5',
};

const db = useSpawnedDatabase();
const { started } = db;

const OTEL = (collector: string) => ({ OTEL_EXPORTER_OTLP_ENDPOINT: collector, OTEL_TRACES_SAMPLER: 'always_on' });

test('with OTEL_EXPORTER_OTLP_ENDPOINT set, requests and their statements come out as spans, continuing a caller trace, and none carries a key, value, prefix or payload', async () => {
  const collector = await startCollector();
  try {
    const port = await freePort();
    const api = spawnApi({ DATABASE_URL: db.url, PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '10', ...UNLIMITED_RATES, ...OTEL(collector.url) });
    started.push(api);
    await untilHealthy(api, port);
    expect(api.lines.find((l) => l.msg === 'API worker listening')?.tracing).toBe('on');
    const sweeper = await spawnSweeper(db.url, OTEL(collector.url));
    started.push(sweeper);
    const queen = new Queen({ url: `http://127.0.0.1:${port}` });

    await queen.kv.put(SECRET.ns, SECRET.key, { v: SECRET.value }, { ttlSeconds: 600 });
    expect((await queen.kv.get(SECRET.ns, SECRET.key)).found).toBe(true);
    for await (const page of queen.kv.getPrefix(SECRET.ns, SECRET.prefix, { limit: 10 })) expect(page.rows).toEqual([]);
    await queen.queue(SECRET.queue).push([{ data: { p: SECRET.payload } }]);
    const [message] = await queen.queue(SECRET.queue).group('g').pop<{ p: string }>();
    expect(message.data.p).toBe(SECRET.payload);
    await queen.transaction().ack(message).kv({ op: 'put', ns: SECRET.ns, key: `${SECRET.key}-2`, value: SECRET.value, ttlSeconds: 600 }).commit();
    await queen.timers.schedule({ queue: SECRET.queue, data: { p: SECRET.payload }, delaySeconds: 1, timerKey: SECRET.timerKey });
    // A refusal: its span says the code.
    const refused = await fetch(`http://127.0.0.1:${port}/api/v1/kv/${SECRET.ns}/${SECRET.key}`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{"value": 1}' });
    expect(refused.status).toBe(400);
    // A caller's trace, continued: its server span has the caller's trace id and span as parent.
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const parent = '00f067aa0ba902b7';
    const traced = await fetch(`http://127.0.0.1:${port}/api/v1/kv/${SECRET.ns}/${SECRET.key}`, { headers: { traceparent: `00-${traceId}-${parent}-01` } });
    expect(traced.status).toBe(200);

    const names = () => new Set(collector.spans.map((s) => `${s.service} ${s.span.name}`));
    await waitFor(
      () =>
        ['GET /api/v1/kv/:ns/*key', 'PUT /api/v1/kv/:ns/*key', 'POST /api/v1/push', 'POST /api/v1/transaction', 'POST /api/v1/timers', 'POST /api/v1/kv'].every((n) => names().has(`queen-kv-api ${n}`)) &&
        names().has('queen-kv-sweeper sweeper cycle') && names().has('queen-kv-sweeper sweeper fire') &&
        collector.spans.some((s) => s.span.traceId === traceId && s.span.kind === 2),
      { what: 'the spans of every call, a sweeper cycle and the timer\'s fire', timeoutMs: 20_000, everyMs: 100 },
    );

    const servers = collector.spans.filter((s) => s.span.kind === 2);
    // The client's put (the batch route): the statement it ran is a child of its request.
    const put = servers.find((s) => s.span.name === 'POST /api/v1/kv')!;
    expect(put.attrs).toMatchObject({ 'http.route': '/api/v1/kv', 'http.request.method': 'POST', 'http.response.status_code': 200 });
    const statement = collector.spans.find((s) => s.span.parentSpanId === put.span.spanId)!;
    expect(statement.span.name).toMatch(/^pg kv_apply_/);
    expect(statement.span.traceId).toBe(put.span.traceId);
    expect(statement.attrs).toMatchObject({ 'db.system.name': 'postgresql', 'queen.pool': 'kv' });
    const push = servers.find((s) => s.span.name === 'POST /api/v1/push')!;
    expect(collector.spans.some((s) => s.span.parentSpanId === push.span.spanId && s.span.name.startsWith('pg log_push') && s.attrs['queen.pool'] === 'message')).toBe(true);
    // The refusal names its code; the continued trace has the caller's span as parent.
    expect(servers.find((s) => s.attrs['http.response.status_code'] === 400)?.attrs['queen.error']).toMatch(/^kv_/);
    const continued = servers.find((s) => s.span.traceId === traceId)!;
    expect(continued.span.parentSpanId).toBe(parent);
    // A path route is named by its template: the namespace and the key are in no name.
    expect(continued.span.name).toBe('GET /api/v1/kv/:ns/*key');
    // The sweeper's cycles are parents of its statements.
    const cycle = collector.spans.find((s) => s.service === 'queen-kv-sweeper' && s.span.name === 'sweeper cycle' && collector.spans.some((c) => c.span.parentSpanId === s.span.spanId))!;
    expect(cycle).toBeDefined();
    expect(typeof cycle.attrs['queen.fired']).toBe('number');
    // The timer's fire: a span of the sweeper's cycle, linked to the request span that scheduled the
    // timer; counts for attributes, and nothing else (no queue, tenant, key or payload).
    const schedule = servers.find((s) => s.span.name === 'POST /api/v1/timers')!;
    const fire = collector.spans.find((s) => s.service === 'queen-kv-sweeper' && s.span.name === 'sweeper fire')!;
    expect(fire.span.links?.map((l) => [l.traceId, l.spanId])).toEqual([[schedule.span.traceId, schedule.span.spanId]]);
    expect(collector.spans.find((s) => s.span.spanId === fire.span.parentSpanId)?.span.name).toBe('sweeper cycle');
    expect(fire.attrs).toEqual({ 'queen.fired': 1, 'queen.duplicates': 0, 'queen.traced': 1, 'queen.links': 1 });
    expect(fire.span.traceId).not.toBe(schedule.span.traceId);

    // Nothing a client sent: not in a span name, an attribute, a resource, anywhere in what was posted.
    const exported = collector.bodies.join('\n');
    for (const [what, text] of Object.entries(SECRET)) expect({ what, found: exported.includes(text) }).toEqual({ what, found: false });
  } finally {
    await collector.close();
  }
});

test('one trace from a producer push through a timer, its fire, the consumer pop and the once-marker bundles: every span has the producer\'s trace id', async () => {
  const collector = await startCollector();
  // The application's side: an SDK in this process (its spans kept in memory: the OTLP exporter
  // loads its transport by a dynamic import, which jest's sandbox refuses), so the client's handler
  // spans are seen beside the cell's.
  const app = new InMemorySpanExporter();
  const provider = new NodeTracerProvider({ spanProcessors: [new SimpleSpanProcessor(app)] });
  provider.register();
  try {
    const port = await freePort();
    const api = spawnApi({ DATABASE_URL: db.url, PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '10', ...UNLIMITED_RATES, ...OTEL(collector.url) });
    started.push(api);
    await untilHealthy(api, port);
    // The sweeper traces too: its cycle and fire spans are traces of their own (one pass fires the
    // timers of many traces), the fire linked to the schedule's span; the message a timer becomes
    // carries the schedule's context itself.
    started.push(await spawnSweeper(db.url, OTEL(collector.url)));
    const queen = new Queen({ url: `http://127.0.0.1:${port}` });
    const producer = trace.getTracer('flow').startSpan('place order');
    const traceId = producer.spanContext().traceId;
    const handled: Array<{ queue: string; traceId: unknown; traceparent: unknown }> = [];
    await context.with(trace.setSpan(context.active(), producer), async () => {
      // The producer's push: the message stores the push request's span.
      await queen.queue('flow-orders').push([{ data: { order: 1 } }]);
      // The first consumer: its bundle acks, marks once and schedules the follow-up timer.
      await queen.queue('flow-orders').group('billing').autoAck(false).limit(1).timeoutMillis(5000).consume(async (m: Message) => {
        handled.push({ queue: m.queue, traceId: m.traceId, traceparent: m.traceparent });
        const done = await queen.transaction().once('flow', 'charge:1', { ttlSeconds: 600 }).ack(m)
          .timer({ op: 'schedule', queue: 'flow-later', payload: { order: 1 }, delaySeconds: 0 }).commit();
        expect(done.success).toBe(true);
      });
      // The timer's fire (the sweeper), then the second consumer and its once-marker bundle.
      await queen.queue('flow-later').group('receipts').autoAck(false).limit(1).timeoutMillis(10_000).consume(async (m: Message) => {
        handled.push({ queue: m.queue, traceId: m.traceId, traceparent: m.traceparent });
        const done = await queen.transaction().once('flow', 'receipt:1', { ttlSeconds: 600 }).ack(m).commit();
        expect(done.success).toBe(true);
      });
    });
    producer.end();
    const uuid = `${traceId.slice(0, 8)}-${traceId.slice(8, 12)}-${traceId.slice(12, 16)}-${traceId.slice(16, 20)}-${traceId.slice(20)}`;
    expect(handled.map((h) => [h.queue, h.traceId, typeof h.traceparent === 'string' && h.traceparent.startsWith(`00-${traceId}-`)])).toEqual([
      ['flow-orders', uuid, true], ['flow-later', uuid, true],
    ]);

    // Every span but the boot's readiness probes (their own traces, before the flow).
    const probes = () => new Set(collector.spans.filter((s) => s.span.name === 'GET /ready').map((s) => s.span.traceId));
    const appSpans = (): Exported[] => app.getFinishedSpans().map((s) => ({
      service: 'flow-app', attrs: {},
      span: { traceId: s.spanContext().traceId, spanId: s.spanContext().spanId, parentSpanId: s.parentSpanContext?.spanId, name: s.name, kind: s.kind },
    }));
    const flow = () => [...collector.spans, ...appSpans()].filter((s) => !probes().has(s.span.traceId) && s.service !== 'queen-kv-sweeper');
    const fires = () => collector.spans.filter((s) => s.service === 'queen-kv-sweeper' && s.span.name === 'sweeper fire');
    const servers = () => flow().filter((s) => s.service === 'queen-kv-api' && s.span.kind === 2).map((s) => s.span.name);
    await waitFor(() => servers().filter((n) => n === 'POST /api/v1/transaction').length === 2 && servers().includes('POST /api/v1/push')
      && flow().filter((s) => s.service === 'flow-app' && s.span.name === 'queen process').length === 2 && fires().length > 0,
    { what: 'the flow\'s spans: the push, two bundles, two handlers, the timer\'s fire', timeoutMs: 20_000, everyMs: 100 }).catch((err: Error) => {
      throw new Error(`${err.message}; exported: ${flow().map((s) => `${s.service} ${s.span.name}`).join(', ')}`);
    });
    const spans = flow();
    expect(spans.filter((s) => s.span.traceId !== traceId).map((s) => `${s.service} ${s.span.name}`)).toEqual([]);
    // The chain: the second handler continues the first bundle's request span (the timer's schedule),
    // the first handler the push's, each bundle its handler's span.
    const byId = new Map(spans.map((s) => [s.span.spanId, s]));
    const handlers = spans.filter((s) => s.span.name === 'queen process');
    expect(handlers.map((h) => byId.get(h.span.parentSpanId!)?.span.name).sort()).toEqual(['POST /api/v1/push', 'POST /api/v1/transaction']);
    const bundles = spans.filter((s) => s.span.name === 'POST /api/v1/transaction');
    expect(bundles.map((b) => byId.get(b.span.parentSpanId!)?.span.name)).toEqual(['queen process', 'queen process']);
    expect(spans.some((s) => s.span.name.startsWith('GET /api/v1/pop'))).toBe(true);
    // The fire is not in the producer's trace but linked into it: to the first bundle's request
    // span, which scheduled the timer (and which the second handler continues).
    const scheduled = bundles.find((b) => handlers.some((h) => h.span.parentSpanId === b.span.spanId))!;
    expect(fires().flatMap((f) => (f.span.links ?? []).map((l) => [l.traceId, l.spanId]))).toEqual([[traceId, scheduled.span.spanId]]);
    expect(fires().every((f) => f.span.traceId !== traceId)).toBe(true);
  } finally {
    await provider.shutdown();
    trace.disable();
    context.disable();
    propagation.disable();
    await collector.close();
  }
});

test('without an endpoint, tracing is off: nothing is exported, and each process says why', async () => {
  const collector = await startCollector();
  try {
    const port = await freePort();
    // The collector's address is in the environment, under a name the SDK does not read: a process
    // that traced anyway would have nowhere else to send, so an empty collector means off.
    const api = spawnApi({ DATABASE_URL: db.url, PORT: String(port), QUEEN_WORKERS: '1', DB_POOL_SIZE: '10', OTEL_TRACES_SAMPLER: 'always_on' });
    started.push(api);
    await untilHealthy(api, port);
    expect(api.lines.find((l) => l.msg === 'API worker listening')?.tracing).toBe('off (no OTEL_EXPORTER_OTLP_ENDPOINT)');
    const sweeper = await spawnSweeper(db.url, { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_SDK_DISABLED: 'true' });
    started.push(sweeper);
    expect(sweeper.lines.find((l) => l.msg === 'config: sweeper')?.tracing).toBe('off (OTEL_SDK_DISABLED=true)');
    const queen = new Queen({ url: `http://127.0.0.1:${port}` });
    await queen.kv.put(SECRET.ns, SECRET.key, { v: SECRET.value }, { ttlSeconds: 600 });
    await new Promise((r) => setTimeout(r, 2500)); // past the exporter's 1 s batch delay
    expect(collector.bodies).toEqual([]);
  } finally {
    await collector.close();
  }
});
