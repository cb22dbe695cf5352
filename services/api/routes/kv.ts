// The KV routes: POST /api/v1/kv (the complete surface) and GET/PUT/DELETE /api/v1/kv/:ns/*key
// (sugar for the three cases people write by hand). Shapes and refusals at the boundary only; the
// rules are in queen.kv_apply_v1.
//
// These routes are answered from node's request before Express sees it (app.ts); every other route
// is Express. The KV rate is decided by somebody else's users, so it gets the short path: an A/B of
// two builds against one PostgreSQL measured the API's CPU per KV get at 227 µs through Express and
// 97 µs here. (Part of Express's cost was its per-request Object.setPrototypeOf, since defused for
// every route by app.ts's expressShaped; the router walk and its per-request closures remain.)
// Paths match case-sensitively.
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Pool } from 'pg';
import { KeyWaiters, writeKeys } from '../admission/keyWaiters';
import { ApiError, answerTooLarge } from '../../../shared/errors';
import { isKvOp } from '../../../shared/kvOps';
import type { Config } from '../../../shared/config';
import type { Logger } from '../../../shared/log';
import type { ApiMetrics } from '../../../shared/metrics';
import { KV_APPLY_BATCH, KV_APPLY_ONE } from '../../../shared/sql/kv';
import type { Guards, KvCall } from '../admission/guards';
import { answerWithBody, notModified, sendJsonText } from '../edge/answer';
import { bodyText, isPlainObject, parseJson, refuseUnstorable , parseObject } from '../edge/body';
import { nameRule, refuseNulKeys, refuseNul } from '../edge/fields';

export interface KvRouteDeps {
  config: Config;
  kvPool: Pool;
  metrics: ApiMetrics;
  log: Logger;
  /** Switch, grant, quota, rate and pool admission (admission/guards.ts), applied to every KV route. */
  guards: Guards;
  /** The request line every answered call gets (edge/requestLog.ts). */
  logRequest: (req: IncomingMessage, res: ServerResponse) => void;
}

type Call = 'batch' | 'get' | 'put' | 'delete';
type Route = { call: Call; ns: string; key: string } | { call: 'keyRequired' };

export const KV_BATCH = '/api/v1/kv';
export const KV_PATH = '/api/v1/kv/';
const PATH_CALLS: Record<string, Call | undefined> = { GET: 'get', HEAD: 'get', PUT: 'put', DELETE: 'delete' };

/** The routes this listener answers (app.ts `routes()`), from the constants that route them. */
export const KV_ROUTES: ReadonlyArray<{ method: string; path: string }> = [
  { method: 'POST', path: KV_BATCH },
  ...Object.keys(PATH_CALLS).map((method) => ({ method, path: `${KV_PATH}:ns/*key` })),
];

/** Which KV call a request is, or undefined when it is not one (Express answers it: 404 not_found). */
function routeOf(method: string | undefined, path: string): Route | undefined {
  if (path === KV_BATCH || path === KV_PATH) return method === 'POST' ? { call: 'batch', ns: '', key: '' } : undefined;
  if (!path.startsWith(KV_PATH)) return undefined;
  const slash = path.indexOf('/', KV_PATH.length);
  if (slash === KV_PATH.length) return undefined;
  // A namespace with no key: say what is missing rather than "no route", whatever the method.
  if (slash < 0 || slash === path.length - 1) return { call: 'keyRequired' };
  const call = PATH_CALLS[method ?? ''];
  return call ? { call, ns: path.slice(KV_PATH.length, slash), key: path.slice(slash + 1) } : undefined;
}

/**
 * Segments arrive percent-encoded and are decoded one by one, so `a/b` and `a%2Fb` address the same
 * key and a trailing slash stays part of it (`a/` and `a` are two keys).
 */
function decodePath(raw: string, what: string): string {
  try {
    return raw.includes('%') ? raw.split('/').map(decodeURIComponent).join('/') : raw;
  } catch {
    throw new ApiError('bad_request', `The ${what} in the path is not valid percent-encoded UTF-8.`);
  }
}

const PATH_FIELDS = ['op', 'ns', 'namespace', 'key'];

/**
 * The refusals every path route shares: no query string, nothing in the body the path already
 * names. Returns the body's text (what travels to PostgreSQL) and, for a put, its parsed fields.
 */
function pathRouteBody(req: IncomingMessage, ns: string, key: string, requireObject: boolean): { text: string; fields: Record<string, unknown> } {
  if (req.url!.includes('?')) {
    throw new ApiError(
      'kv_query_string_not_allowed',
      'KV path routes take no query string: keys and prefixes in URLs end up in every access log on the way.',
    );
  }
  // PostgreSQL's text cannot hold U+0000, so the SQL rules could never see it (edge/fields.ts, refuseNul).
  refuseNul(key, 'kv_invalid_key', 'A key may not contain U+0000.');
  refuseNul(ns, 'kv_invalid_namespace', NAMESPACE_RULE);
  const text = bodyText(req);
  if (text.trim() === '') {
    if (requireObject) throw new ApiError('invalid_json', 'This route needs a JSON object body with at least value and an expiry.');
    return { text: '{}', fields: {} };
  }
  const body = parseObject(text);
  const conflicting = PATH_FIELDS.filter((f) => f in body);
  if (conflicting.length > 0) {
    throw new ApiError(
      'kv_body_conflicts_with_path',
      `The body carries ${conflicting.join(', ')}, which the path already names; remove them from the body.`,
    );
  }
  return { text, fields: body };
}

const NAMESPACE_RULE = nameRule('A namespace');

/** The KV surface as a request listener: true when it took the request. */
export function kvRoutes({ config, kvPool, metrics, log, guards, logRequest }: KvRouteDeps): (req: IncomingMessage, res: ServerResponse) => boolean {
  const withBody = answerWithBody(config, log);
  const keyWaiters = new KeyWaiters((kvPool as unknown as { options: { max: number } }).options.max, config.kvAcquireTimeoutMs);

  // Each call reads top to bottom: the caller and the switch, the body, the rest of the admission
  // (admission/guards.ts), the statement, the answer; a refusal at any step is thrown to the one error handler.

  async function batch(req: IncomingMessage, res: ServerResponse, call: KvCall): Promise<void> {
    const stop = metrics.kvDuration.startTimer({ route: 'batch' });
    // What the counters need of the parsed body, taken at once: the parsed operations themselves are
    // not kept while the statement runs (held across the wait for PostgreSQL, they survived young
    // collections and were promoted to the old generation as garbage: 100 puts a request at 64
    // clients, bench:kv with --trace-gc 2026-12-01, 60 KB promoted per request before, 52 KB after).
    let counted: Map<string, number> | undefined;
    let release: (() => void) | undefined;
    try {
      const tenant = guards.kvTenant(call);
      const text = bodyText(req);
      let ops: unknown;
      {
        const parsed = parseJson(text, false);
        ops = isPlainObject(parsed) ? parsed.operations : undefined;
      }
      counted = opCounts(ops);
      refuseNulKeys(text, ops);
      refuseUnstorable(text);
      // Before the admission: a refused caller holds no quota and no connection.
      release = await keyWaiters.enter(tenant, writeKeys(ops));
      const admitted = await guards.admitKv(call, ops);
      ops = undefined;
      const { rows } = await admitted.track(kvPool.query({ ...KV_APPLY_BATCH, values: [tenant, text] }).catch(tooLarge));
      // An object in place of the answers: the verdict of a lost `required`, written out as is.
      const lost = rows[0].results.startsWith('{');
      sendJsonText(res, 200, lost ? rows[0].results : `{"ok":true,"results":${rows[0].results}}`);
      countOps(metrics, counted, lost ? 'precondition' : 'ok');
    } catch (err) {
      countOps(metrics, counted, 'refused');
      throw err;
    } finally {
      release?.();
      stop();
    }
  }

  async function one(req: IncomingMessage, res: ServerResponse, call: KvCall, op: 'get' | 'put' | 'delete', rawNs: string, rawKey: string): Promise<void> {
    const stop = metrics.kvDuration.startTimer({ route: op });
    let release: (() => void) | undefined;
    try {
      const ns = decodePath(rawNs, 'namespace');
      const key = decodePath(rawKey, 'key');
      const tenant = guards.kvTenant(call);
      const body = pathRouteBody(req, ns, key, op === 'put');
      if (op !== 'get') release = await keyWaiters.enter(tenant, [[ns, key]]);
      // The one operation the path names, as the guards count it (a put's value sizes the quota delta).
      const admitted = await guards.admitKv(call, [op === 'put' ? { ...body.fields, op, key } : { op }]);
      const { rows } = await admitted.track(kvPool.query({ ...KV_APPLY_ONE, values: [tenant, op, ns, key, op === 'get' ? '{}' : body.text] }));
      const { body: answer, version, ok } = rows[0];
      metrics.kvOps.inc({ op, outcome: ok === false ? 'precondition' : 'ok' });
      if (op === 'get' && version !== null && version !== '0') {
        const etag = `"${version}"`;
        res.setHeader('ETag', etag);
        if (notModified(req, etag)) return void res.writeHead(304).end();
      }
      sendJsonText(res, 200, answer);
    } catch (err) {
      metrics.kvOps.inc({ op, outcome: 'refused' });
      throw err;
    } finally {
      release?.();
      stop();
    }
  }

  return (req, res) => {
    const url = req.url ?? '';
    if (!url.startsWith(KV_BATCH)) return false;
    const query = url.indexOf('?');
    const route = routeOf(req.method, query < 0 ? url : url.slice(0, query));
    if (!route) return false;
    // The switch, the tenant and the grant, looked up once (null: preflight answered the call itself).
    const call = route.call === 'keyRequired' ? undefined : guards.preflight(req, res, route.call);
    if (call === null) return true;
    logRequest(req, res);
    const answer = (): Promise<void> => {
      if (route.call === 'keyRequired' || call === undefined) {
        throw new ApiError('kv_key_required', 'The path names a namespace but no key: /api/v1/kv/:ns/:key.');
      }
      return route.call === 'batch' ? batch(req, res, call) : one(req, res, call, route.call, route.ns, route.key);
    };
    withBody(req, res, answer);
    return true;
  };
}

/** A read whose answer would pass PostgreSQL's limit on one JSON array: kv_batch_too_large, not a 500. */
function tooLarge(err: unknown): never {
  throw answerTooLarge(err);
}

/** Operations by name, as the counters label them; a body without an operations array is one 'unknown'. */
function opCounts(ops: unknown): Map<string, number> {
  const counts = new Map<string, number>();
  if (!Array.isArray(ops)) return counts.set('unknown', 1);
  for (const op of ops) {
    const name = isPlainObject(op) && isKvOp(op.op) ? op.op : 'unknown';
    counts.set(name, (counts.get(name) ?? 0) + 1);
  }
  return counts;
}

function countOps(metrics: ApiMetrics, counts: Map<string, number> | undefined, outcome: string): void {
  if (!counts) return void metrics.kvOps.inc({ op: 'unknown', outcome });
  for (const [op, n] of counts) metrics.kvOps.inc({ op, outcome }, n);
}
