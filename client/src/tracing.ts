// Trace context in the client (the cell's docs/tracing.md, "How context travels"), with
// OpenTelemetry only if the application has it: `@opentelemetry/api` is an optional peer
// dependency, loaded on first use (or handed in as the `tracing` option); without it the client
// sends no traceparent and starts no span, and costs one check a call.
//
//  - Every call made while a span is active (the application's own, or a consume() handler's)
//    sends that span as a W3C `traceparent` header: the cell's request span continues it, and a push
//    or a timer scheduled by that request stores it on the message (a bundle's commit included).
//  - A consume() handler runs in a CONSUMER span whose parent is the message's `traceparent` (the
//    request that pushed it, or scheduled the timer it came from); the other messages of a batch
//    are its links. The span names no queue, partition or payload: `queen process`.
//
// The header is written here from the span's context, not through the global propagator, so it
// goes whether or not the application registered one.

/** The span context fields used here (OpenTelemetry's SpanContext). */
interface SpanContextLike {
  traceId: string;
  spanId: string;
  traceFlags: number;
  isRemote?: boolean;
}

interface SpanLike {
  spanContext(): SpanContextLike;
  setStatus(status: { code: number; message?: string }): unknown;
  end(): void;
}

/** What the client calls of `@opentelemetry/api` (a structural subset, so its types are not needed). */
interface Api {
  trace: {
    getTracer(name: string): { startSpan(name: string, options: Record<string, unknown>, context: unknown): SpanLike };
    getActiveSpan(): SpanLike | undefined;
    setSpan(context: unknown, span: SpanLike): unknown;
    setSpanContext(context: unknown, spanContext: SpanContextLike): unknown;
  };
  context: { active(): unknown; with<T>(context: unknown, fn: () => T): T };
}

/**
 * The `tracing` option: `true` (the default) uses `@opentelemetry/api` when the application has
 * it installed; `false` turns trace context off; an object is the `@opentelemetry/api` module
 * itself (one the application loaded: a bundle, or another copy than the client would find).
 */
export type TracingOption = boolean | object;

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const INVALID_TRACE = '0'.repeat(32);
const INVALID_SPAN = '0'.repeat(16);
const SPAN_KIND_CONSUMER = 4;
const STATUS_ERROR = 2;

let installed: Api | null | undefined;

/** `@opentelemetry/api` if the application has it, loaded once; null when it does not. */
function installedApi(): Api | null {
  if (installed === undefined) {
    try {
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      installed = require('@opentelemetry/api') as Api;
    } catch {
      installed = null;
    }
  }
  return installed;
}

/** The API the option names, or undefined when trace context is off or OpenTelemetry absent. */
export function tracingApi(option: TracingOption | undefined): Api | undefined {
  if (option === false) return undefined;
  if (option === undefined || option === true) return installedApi() ?? undefined;
  return option as Api;
}

/** The active span as a `traceparent` header value, or undefined (none, or an invalid one). */
export function activeTraceparent(api: Api | undefined): string | undefined {
  const span = api?.trace.getActiveSpan();
  if (span === undefined) return undefined;
  const c = span.spanContext();
  if (!/^[0-9a-f]{32}$/.test(c.traceId) || !/^[0-9a-f]{16}$/.test(c.spanId) || c.traceId === INVALID_TRACE || c.spanId === INVALID_SPAN) return undefined;
  return `00-${c.traceId}-${c.spanId}-${(c.traceFlags & 0xff).toString(16).padStart(2, '0')}`;
}

/** A message's `traceparent` (the cell answers it per message) as a remote span context. */
function parentOf(message: { traceparent?: unknown }): SpanContextLike | undefined {
  const m = typeof message.traceparent === 'string' ? TRACEPARENT.exec(message.traceparent) : null;
  if (!m || m[1] === INVALID_TRACE || m[2] === INVALID_SPAN) return undefined;
  return { traceId: m[1], spanId: m[2], traceFlags: parseInt(m[3], 16) & 1, isRemote: true };
}

/**
 * Runs a consume() handler in a CONSUMER span continuing the first message's traceparent (the
 * others linked), so what it calls (a bundle's commit, a push) continues the producer's trace;
 * the span ends when the handler settles, marked an error when it throws. Off: just runs it.
 */
export async function inConsumeSpan<T>(api: Api | undefined, messages: Array<{ traceparent?: unknown }>, fn: () => T | Promise<T>): Promise<T> {
  if (api === undefined) return fn();
  const parents = messages.map(parentOf).filter((c): c is SpanContextLike => c !== undefined);
  const active = api.context.active();
  const parent = parents.length > 0 ? api.trace.setSpanContext(active, parents[0]) : active;
  const span = api.trace.getTracer('@queen-kv/client').startSpan('queen process', {
    kind: SPAN_KIND_CONSUMER,
    links: parents.slice(1).map((context) => ({ context })),
    attributes: { 'messaging.system': 'queen', 'messaging.operation.type': 'process', 'messaging.batch.message_count': messages.length },
  }, parent);
  try {
    return await api.context.with(api.trace.setSpan(parent, span), fn);
  } catch (err) {
    span.setStatus({ code: STATUS_ERROR });
    throw err;
  } finally {
    span.end();
  }
}
