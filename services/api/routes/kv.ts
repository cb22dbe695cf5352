// The KV routes: POST /api/v1/kv (the complete surface) and GET/PUT/DELETE /api/v1/kv/:ns/*key
// (sugar for the three cases people write by hand). Shapes and refusals at the boundary only; the
// rules are in queen.kv_apply_v1.
import { Router, Request } from 'express';
import type { Pool } from 'pg';
import { ApiError } from '../../../shared/errors';
import type { Config } from '../../../shared/config';
import type { Metrics } from '../../../shared/metrics';
import { KV_APPLY_BATCH, KV_APPLY_ONE } from '../../../shared/sql/kv';
import type { Guards } from '../guards';
import { bodyText, isPlainObject, notModified, parseJson, rawBody, sendJsonText } from '../http';

export interface KvRouteDeps {
  config: Config;
  kvPool: Pool;
  metrics: Metrics;
  /** Switch, grant, quota, rate and pool admission (guards.ts), applied to every KV route. */
  guards: Guards;
}

const PATH_FIELDS = ['op', 'ns', 'namespace', 'key'];

/**
 * PostgreSQL's text cannot hold U+0000, so a NUL in a key is refused here with the KV's own code
 * (the SQL rule "no NUL" could never see it). A NUL elsewhere fails the jsonb cast: invalid_json.
 */
function refuseNulKeys(text: string, ops: unknown): void {
  if (!text.includes('\\u0000') || !Array.isArray(ops)) return;
  ops.forEach((op, index) => {
    if (!isPlainObject(op)) return;
    const keys = [op.key, op.prefix, ...(Array.isArray(op.keys) ? op.keys : [])];
    if (keys.some((k) => typeof k === 'string' && k.includes('\u0000'))) {
      throw new ApiError('kv_invalid_key', `Operation ${index}: a key may not contain U+0000.`, { index });
    }
  });
}

/** The refusals every path route shares: no query string, nothing in the body the path already names. */
function pathRouteBody(req: Request, requireObject: boolean): string {
  if (req.originalUrl.includes('?')) {
    throw new ApiError(
      'kv_query_string_not_allowed',
      'KV path routes take no query string: keys and prefixes in URLs end up in every access log on the way.',
    );
  }
  const key = pathKey(req);
  if (key.includes('\u0000')) throw new ApiError('kv_invalid_key', 'A key may not contain U+0000.');
  const text = bodyText(req);
  if (text.trim() === '') {
    if (requireObject) throw new ApiError('invalid_json', 'This route needs a JSON object body with at least value and an expiry.');
    return '{}';
  }
  const body = parseJson(text);
  if (!isPlainObject(body)) throw new ApiError('invalid_json', 'The request body must be a JSON object.');
  const conflicting = PATH_FIELDS.filter((f) => f in body);
  if (conflicting.length > 0) {
    throw new ApiError(
      'kv_body_conflicts_with_path',
      `The body carries ${conflicting.join(', ')}, which the path already names; remove them from the body.`,
    );
  }
  return text;
}

/** `*key` is a catch-all: segments arrive decoded, so `a/b` and `a%2Fb` address the same key. */
function pathKey(req: Request): string {
  const raw = (req.params as Record<string, string | string[]>).key;
  return Array.isArray(raw) ? raw.join('/') : String(raw);
}

export function kvRoutes({ config, kvPool, metrics, guards }: KvRouteDeps): Router {
  const router = Router();
  const body = rawBody(config);

  router.post('/api/v1/kv', body, async (req, res) => {
    const stop = metrics.kvDuration.startTimer({ route: 'batch' });
    let ops: unknown;
    try {
      const text = bodyText(req);
      const admitted = () => {
        const parsed = parseJson(text);
        ops = isPlainObject(parsed) ? parsed.operations : undefined;
        refuseNulKeys(text, ops);
        return ops;
      };
      await guards.kv(req, { where: 'route', ops: admitted }, async (tenant) => {
        const { rows } = await kvPool.query({ ...KV_APPLY_BATCH, values: [tenant, text] });
        sendJsonText(res, 200, `{"ok":true,"results":${rows[0].results}}`);
      });
      countOps(metrics, ops, 'ok');
    } catch (err) {
      countOps(metrics, ops, (err as { code?: string }).code === 'QK409' ? 'precondition' : 'refused');
      throw err;
    } finally {
      stop();
    }
  });

  const one = (op: 'get' | 'put' | 'delete', requireObject: boolean) => async (req: Request, res: import('express').Response) => {
    const stop = metrics.kvDuration.startTimer({ route: op });
    try {
      let text = '{}';
      // The one operation the path names, as the guards count it (a put's value sizes the quota delta).
      const admitted = () => {
        text = pathRouteBody(req, requireObject);
        return [op === 'put' ? { ...(parseJson(text) as object), op, key: pathKey(req) } : { op }];
      };
      await guards.kv(req, { where: 'route', ops: admitted }, async (tenant) => {
        const { rows } = await kvPool.query({
          ...KV_APPLY_ONE,
          values: [tenant, op, (req.params as Record<string, string>).ns, pathKey(req), op === 'get' ? '{}' : text],
        });
        const { body: answer, version } = rows[0];
        if (op === 'get' && version !== null && version !== '0') {
          const etag = `"${version}"`;
          res.setHeader('ETag', etag);
          if (notModified(req, etag)) return void res.writeHead(304).end();
        }
        sendJsonText(res, 200, answer);
      });
      metrics.kvOps.inc({ op, outcome: 'ok' });
    } catch (err) {
      metrics.kvOps.inc({ op, outcome: (err as { code?: string }).code === 'QK409' ? 'precondition' : 'refused' });
      throw err;
    } finally {
      stop();
    }
  };

  router.get('/api/v1/kv/:ns/*key', body, one('get', false));
  router.put('/api/v1/kv/:ns/*key', body, one('put', true));
  router.delete('/api/v1/kv/:ns/*key', body, one('delete', false));
  // A namespace with no key: say what is missing rather than "no route".
  router.all(['/api/v1/kv/:ns', '/api/v1/kv/:ns/'], () => {
    throw new ApiError('kv_key_required', 'The path names a namespace but no key: /api/v1/kv/:ns/:key.');
  });
  return router;
}

const KNOWN_OPS = new Set(['get', 'getMany', 'getPrefix', 'put', 'putIfAbsent', 'delete', 'incr']);

function countOps(metrics: Metrics, ops: unknown, outcome: string): void {
  if (!Array.isArray(ops)) return void metrics.kvOps.inc({ op: 'unknown', outcome });
  for (const op of ops) {
    const name = isPlainObject(op) && typeof op.op === 'string' && KNOWN_OPS.has(op.op) ? op.op : 'unknown';
    metrics.kvOps.inc({ op: name, outcome });
  }
}
