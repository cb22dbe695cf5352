// OpenTelemetry traces, off unless the standard variables ask for them (docs/tracing.md). On, each
// API worker and each sweeper exports its spans over OTLP/HTTP; off, the SDK is never loaded and
// the hot path pays one `undefined` test per request and per statement (bench:kv measures it).
//
// The spans are written here by hand, not by the instrumentation packages: those record what they
// see (a URL with its key and query string, a statement's text), and the cell's privacy rule is
// that no key, prefix, value or payload reaches anything outside the database. A span carries a
// route template, a statement's name, a pool, a status and a code: names the code chose, never a
// value a client sent.
import { context, isSpanContextValid, propagation, ROOT_CONTEXT, Span, SpanKind, SpanStatusCode, trace, TraceFlags, Tracer } from '@opentelemetry/api';
import type { IncomingHttpHeaders } from 'node:http';

let tracer: Tracer | undefined;
let shutdown: (() => Promise<void>) | undefined;

/** Why tracing is off for this environment, or undefined when it is on. */
export function tracingOffReason(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return 'OTEL_SDK_DISABLED=true';
  const exporter = (env.OTEL_TRACES_EXPORTER ?? 'otlp').trim().toLowerCase();
  if (exporter === 'none') return 'OTEL_TRACES_EXPORTER=none';
  if (exporter !== 'otlp') return `OTEL_TRACES_EXPORTER=${exporter} is not one the cell ships (otlp or none)`;
  if (!env.OTEL_EXPORTER_OTLP_ENDPOINT && !env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return 'no OTEL_EXPORTER_OTLP_ENDPOINT';
  return undefined;
}

/**
 * Starts the SDK when the environment asks for it: the OTLP/HTTP exporter (its endpoint, headers
 * and timeout from OTEL_EXPORTER_OTLP_*), the sampler from OTEL_TRACES_SAMPLER(_ARG), the service
 * name from OTEL_SERVICE_NAME or `defaultService`, W3C trace context on incoming requests.
 * Answers whether it started.
 */
export function startTracing(defaultService: string, env: NodeJS.ProcessEnv = process.env): boolean {
  if (tracer !== undefined || tracingOffReason(env) !== undefined) return tracer !== undefined;
  // Loaded only here: a cell with tracing off never loads the SDK.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { NodeTracerProvider, BatchSpanProcessor } = require('@opentelemetry/sdk-trace-node') as typeof import('@opentelemetry/sdk-trace-node');
  const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-http') as typeof import('@opentelemetry/exporter-trace-otlp-http');
  const { resourceFromAttributes, envDetector, detectResources } = require('@opentelemetry/resources') as typeof import('@opentelemetry/resources');
  /* eslint-enable @typescript-eslint/no-require-imports */
  const resource = resourceFromAttributes({ 'service.name': defaultService }).merge(detectResources({ detectors: [envDetector] }));
  const provider = new NodeTracerProvider({
    resource,
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter() as never, { scheduledDelayMillis: 1000 })],
  });
  provider.register();
  tracer = trace.getTracer('queen-kv');
  shutdown = () => provider.shutdown();
  return true;
}

/** Flushes and stops the exporter, at most `ms`; a collector that does not answer never holds a stop. */
export async function stopTracing(ms = 2000): Promise<void> {
  if (shutdown === undefined) return;
  const stop = shutdown;
  shutdown = undefined;
  tracer = undefined;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([stop().catch(() => undefined), new Promise((r) => (timer = setTimeout(r, ms)))]);
  clearTimeout(timer);
}

/** The tracer when tracing is on; undefined when off (callers test it and do nothing else). */
export function activeTracer(): Tracer | undefined {
  return tracer;
}

/** A server span for one HTTP request, continuing the caller's `traceparent` if it sent one. */
export function startRequestSpan(t: Tracer, method: string | undefined, headers: IncomingHttpHeaders): Span {
  const parent = propagation.extract(ROOT_CONTEXT, headers);
  return t.startSpan(`${method ?? 'GET'}`, { kind: SpanKind.SERVER, attributes: { 'http.request.method': method ?? 'GET' } }, parent);
}

/** Names and closes a request's span once its answer is known: the route template, the status, the code. */
export function endRequestSpan(span: Span, o: { method?: string; route: string; status: number; code?: string; tenant?: string; admission?: string }): void {
  span.updateName(`${o.method ?? 'GET'} ${o.route}`);
  span.setAttribute('http.route', o.route);
  span.setAttribute('http.response.status_code', o.status);
  if (o.code !== undefined) span.setAttribute('queen.error', o.code);
  if (o.tenant !== undefined) span.setAttribute('queen.tenant', o.tenant);
  if (o.admission !== undefined) span.setAttribute('queen.admission', o.admission);
  if (o.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR, message: o.code });
  span.end();
}

/** Runs `fn` with `span` as the active span, so statements it sends become its children. */
export function withSpan<T>(span: Span, fn: () => T): T {
  return context.with(trace.setSpan(context.active(), span), fn);
}

/** The span for one statement on a pool: its prepared name (never its text or parameters). */
export function startStatementSpan(t: Tracer, pool: string, statement: string): Span {
  return t.startSpan(`pg ${statement}`, {
    kind: SpanKind.CLIENT,
    attributes: { 'db.system.name': 'postgresql', 'db.query.summary': statement, 'queen.pool': pool },
  });
}

/** Closes a statement's span, with the SQLSTATE of a failure (never its message, which can quote a value). */
export function endStatementSpan(span: Span, err?: unknown): void {
  if (err !== undefined) {
    const code = (err as { code?: unknown } | null)?.code;
    if (typeof code === 'string') span.setAttribute('db.response.status_code', code);
    span.setStatus({ code: SpanStatusCode.ERROR });
  }
  span.end();
}

/**
 * Runs `fn` inside an internal span named `name` when tracing is on (a sweeper cycle), its result
 * described by `describe` (counts, never rows); off, just runs `fn`.
 */
export async function inSpan<T>(name: string, fn: () => Promise<T>, describe?: (result: T) => Record<string, number | string | boolean>): Promise<T> {
  if (tracer === undefined) return fn();
  const span = tracer.startSpan(name, { kind: SpanKind.INTERNAL });
  if (!span.isRecording()) return fn();
  try {
    const result = await withSpan(span, fn);
    if (describe !== undefined) span.setAttributes(describe(result));
    return result;
  } catch (err) {
    const code = (err as { code?: unknown } | null)?.code;
    if (typeof code === 'string') span.setAttribute('queen.error', code);
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw err;
  } finally {
    span.end();
  }
}

/** Links one fire span carries at most: the SDK's default link limit (OTEL_SPAN_LINK_COUNT_LIMIT). */
export const FIRE_LINKS = 128;

const HEX_TRACE = /^[0-9a-f]{32}$/;
const HEX_SPAN = /^[0-9a-f]{16}$/;

/**
 * The span of one sweeper pass that fired timers (`sweeper fire`, a child of its `sweeper cycle`),
 * recorded once the pass has answered, over its start and end: one pass fires the timers of many
 * traces, so the span is of the sweeper's trace, and links to the span that scheduled each fired
 * timer (its stored trace context; up to FIRE_LINKS distinct ones). The message a timer becomes
 * keeps the schedule's context itself (sql/functions/sweeper.sql). Counts and ids only: no queue,
 * tenant, key or payload. Called only with tracing on (the caller tests activeTracer()).
 */
export function recordFireSpan(t: Tracer, o: { startMs: number; endMs: number; fired: number; duplicates: number; traced: number; links: Array<{ traceId: string; spanId: string }> }): void {
  const links = o.links
    .filter((l) => HEX_TRACE.test(l.traceId) && HEX_SPAN.test(l.spanId))
    .slice(0, FIRE_LINKS)
    .map((l) => ({ context: { traceId: l.traceId, spanId: l.spanId, traceFlags: TraceFlags.SAMPLED, isRemote: true } }))
    .filter((l) => isSpanContextValid(l.context));
  const span = t.startSpan('sweeper fire', {
    kind: SpanKind.INTERNAL,
    startTime: o.startMs,
    links,
    attributes: { 'queen.fired': o.fired, 'queen.duplicates': o.duplicates, 'queen.traced': o.traced, 'queen.links': links.length },
  });
  span.end(o.endMs);
}

/**
 * The trace context a message or timer stored by this request carries (docs/tracing.md): the
 * request's own span when tracing is on and the sampler kept it, as `{"traceId","spanId"}` JSON
 * text for the _traced statements (sql/functions/log_push.sql); undefined otherwise. Off, one
 * `undefined` test: a request the sampler left out carries no context (edge/requestSpan.ts), so
 * no span is active for it.
 */
export function callerTrace(): string | undefined {
  if (tracer === undefined) return undefined;
  const span = trace.getActiveSpan();
  if (span === undefined || !span.isRecording()) return undefined;
  const { traceId, spanId } = span.spanContext();
  return `{"traceId":"${traceId}","spanId":"${spanId}"}`;
}
