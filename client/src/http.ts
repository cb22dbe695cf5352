// The one way the client talks HTTP: Node's fetch, a bound on every call, and retries only where the
// cell says so.
//
// The retry rule. A call is sent again only when the cell answered 429 or 503 *with* Retry-After:
// those are the cell's "not now, come back" (a rate limit, a paused KV, an exhausted pool, a database
// that is restarting). Never on a 200 (a verdict such as `applied: false` or `kv_precondition` is
// an answer, not a failure), never on another 4xx (it will not work next time either), never on a
// network failure or a timeout (a write may have applied; the caller decides). The wait is what
// Retry-After says plus a little jitter, so that callers paused together do not come back together;
// the number of retries is bounded, and a Retry-After longer than `maxDelayMs` is not waited for:
// the error is thrown at once, carrying `retryAfterSeconds`.
//
// A retry sends the same bytes: bodies are serialized once, before the first attempt, so a push's
// and a bundle's transactionIds are the same on every attempt and a retry cannot store twice.

import { QueenError } from './errors';
import { parseJson } from './json';
import { activeTraceparent, tracingApi, type TracingOption } from './tracing';

export interface RetryInfo {
  /** 1 for the first retry. */
  attempt: number;
  status: number;
  code: string;
  /** What the client will wait before sending again (Retry-After plus jitter). */
  delayMs: number;
  method: string;
  path: string;
}

export interface RetryOptions {
  /** Retries after the first attempt (default 5). */
  attempts?: number;
  /** The longest Retry-After the client waits for (default 60000 ms); a longer one is thrown at once. */
  maxDelayMs?: number;
  /** Called before each wait: a place to log or count. */
  onRetry?: (info: RetryInfo) => void;
}

export interface HttpOptions {
  url: string;
  /** Sent on every call, before the ones below. */
  headers?: Record<string, string>;
  /** The tenant, as the `x-queen-tenant` header (cells run with QUEEN_TENANCY_HEADER=1). */
  tenant?: string;
  /** Sent as `Authorization: Bearer <token>`. */
  bearerToken?: string;
  /** Bound of a call, in milliseconds (default 30000); a long-polling pop adds its own wait. */
  timeoutMs?: number;
  /** `false`: never retry. */
  retry?: RetryOptions | false;
  /**
   * Trace context (OpenTelemetry, only if the application has `@opentelemetry/api`): by default
   * each call made while a span is active sends it as `traceparent`, and consume() runs handlers in
   * a span continuing the message's trace. `false` turns both off; an object is the
   * `@opentelemetry/api` module to use. See the README's Tracing section.
   */
  tracing?: TracingOption;
}

export interface Answer {
  status: number;
  body: unknown;
}

export interface CallOptions {
  /** Already serialized (stringifyJson): the same bytes on every attempt. */
  body?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
}

const DEFAULT_TIMEOUT_MS = 30_000;
const DEFAULT_ATTEMPTS = 5;
const DEFAULT_MAX_DELAY_MS = 60_000;

/** Retry-After in milliseconds: delta-seconds or an HTTP date (RFC 9110 10.2.3). */
export function retryAfterMs(header: string | null): number | undefined {
  if (header === null) return undefined;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** Up to a fifth of the wait (at least 50 ms, at most a second) on top of it. */
function jittered(ms: number): number {
  return Math.round(ms + Math.random() * Math.min(1000, Math.max(50, ms * 0.2)));
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', aborted);
    };
    const aborted = () => {
      done();
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      done();
      resolve();
    }, ms);
    signal?.addEventListener('abort', aborted, { once: true });
  });
}

/** The caller's signal and the call's bound, as one signal (AbortSignal.any is Node 20.3+). */
function bounded(timeoutMs: number, signal?: AbortSignal): { signal: AbortSignal; timedOut: () => boolean; release: () => void } {
  const controller = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    controller.abort(new Error('timeout'));
  }, timeoutMs);
  const follow = () => controller.abort(signal!.reason);
  if (signal?.aborted) controller.abort(signal.reason);
  else signal?.addEventListener('abort', follow, { once: true });
  return {
    signal: controller.signal,
    timedOut: () => timedOut,
    release: () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', follow);
    },
  };
}

export class HttpClient {
  private readonly bases: string[];
  private turn = 0;
  private closed = false;
  private readonly headers: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly retry: Required<Omit<RetryOptions, 'onRetry'>> & Pick<RetryOptions, 'onRetry'>;
  private readonly retries: boolean;
  /** @internal `@opentelemetry/api`, when trace context is on and the application has it. */
  readonly tracing: ReturnType<typeof tracingApi>;

  /** `urls`: more than one are taken in turn, a call each (every retry of a call goes where it went). */
  constructor(options: HttpOptions, urls: string[] = [options.url]) {
    if (urls.length === 0) throw new TypeError("Queen needs the cell's URL, http(s)://host:port; got none.");
    for (const url of urls) {
      if (typeof url !== 'string' || !/^https?:\/\//.test(url)) {
        throw new TypeError(`Queen needs the cell's URL, http(s)://host:port; got ${JSON.stringify(url)}.`);
      }
    }
    this.bases = urls.map((url) => url.replace(/\/+$/, ''));
    this.headers = { accept: 'application/json', ...options.headers };
    if (options.tenant !== undefined) this.headers['x-queen-tenant'] = options.tenant;
    if (options.bearerToken !== undefined) this.headers.authorization = `Bearer ${options.bearerToken}`;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.retries = options.retry !== false;
    this.tracing = tracingApi(options.tracing);
    const retry = options.retry === false ? {} : (options.retry ?? {});
    this.retry = {
      attempts: retry.attempts ?? DEFAULT_ATTEMPTS,
      maxDelayMs: retry.maxDelayMs ?? DEFAULT_MAX_DELAY_MS,
      onRetry: retry.onRetry,
    };
  }

  /** Every later call throws QueenError `closed`. */
  close(): void {
    this.closed = true;
  }

  async call(method: string, path: string, options: CallOptions = {}): Promise<Answer> {
    if (this.closed) throw new QueenError({ status: 0, code: 'closed', message: `${method} ${path}: this Queen was closed (close()).` });
    const base = this.bases[this.turn++ % this.bases.length];
    let headers = options.body === undefined ? this.headers : { ...this.headers, 'content-type': 'application/json' };
    // The active span (a consume() handler's, or the application's) continues in the cell.
    const traceparent = this.tracing === undefined || 'traceparent' in this.headers ? undefined : activeTraceparent(this.tracing);
    if (traceparent !== undefined) headers = { ...headers, traceparent };
    for (let attempt = 0; ; attempt++) {
      const bound = bounded(options.timeoutMs ?? this.timeoutMs, options.signal);
      let status: number;
      let text: string;
      let retryAfter: string | null;
      try {
        const res = await fetch(base + path, { method, headers, body: options.body, signal: bound.signal });
        status = res.status;
        retryAfter = res.headers.get('retry-after');
        text = await res.text();
      } catch (err) {
        if (options.signal?.aborted) throw options.signal.reason ?? err;
        if (bound.timedOut()) {
          throw new QueenError(
            { status: 0, code: 'timeout', message: `${method} ${path} got no answer within ${options.timeoutMs ?? this.timeoutMs} ms; a write may or may not have applied.` },
            { cause: err },
          );
        }
        throw new QueenError(
          { status: 0, code: 'network_error', message: `${method} ${path} did not reach the cell: ${(err as Error).message}.` },
          { cause: err },
        );
      } finally {
        bound.release();
      }
      let body: unknown;
      try {
        body = text === '' ? undefined : parseJson(text);
      } catch (err) {
        if (status >= 200 && status < 300) throw err;
        body = undefined;
      }
      if (status >= 200 && status < 300) return { status, body };

      const refusal = (body ?? {}) as { error?: unknown; message?: unknown; index?: unknown };
      const code = typeof refusal.error === 'string' ? refusal.error : `http_${status}`;
      const waitMs = retryAfterMs(retryAfter);
      const error = new QueenError({
        status,
        code,
        message: typeof refusal.message === 'string' ? refusal.message : `${method} ${path} answered ${status}.`,
        index: typeof refusal.index === 'number' ? refusal.index : undefined,
        retryAfterSeconds: waitMs === undefined ? undefined : Math.ceil(waitMs / 1000),
        body,
      });
      const retryable = (status === 429 || status === 503) && waitMs !== undefined;
      if (!this.retries || !retryable || attempt >= this.retry.attempts || waitMs > this.retry.maxDelayMs) throw error;
      const delayMs = jittered(waitMs);
      this.retry.onRetry?.({ attempt: attempt + 1, status, code, delayMs, method, path });
      await sleep(delayMs, options.signal);
    }
  }
}
