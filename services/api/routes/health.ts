// Liveness and readiness, apart (deploy/k8s/api.yaml probes them so):
//  - GET /health, liveness: this process can serve. It reads no database, so a slow or absent
//    database never fails it: a liveness probe that restarts a cell because PostgreSQL is busy
//    loses a worker at the worst moment, and a restart does not bring the database back. Before
//    (2026-12-02) it ran SELECT 1 and answered 503 db_unavailable 7 times during a fuzz run with no
//    fault injected, and during a pool starvation.
//  - GET /ready, readiness: this worker should get traffic: it is not draining, and the database
//    answers. A busy database does not trip it: any answer the message pool had within
//    QUEEN_READY_TOLERANCE_MS counts (a statement's result or its own error), so a probe that waited
//    behind a full pool is not a database down. Else a SELECT 1 decides, bounded by
//    QUEEN_HEALTH_TIMEOUT_MS (a frozen database is a 503, never a probe that hangs). A refused or
//    broken connection is 503 at once, tolerance or not: the database is gone, not slow.
import { Router } from 'express';
import type { Pool } from 'pg';
import { sendError } from '../edge/answer';
import { ApiError, isConnectionFailure } from '../../../shared/errors';
import { lastAnswer } from '../../../shared/db';

export interface HealthOptions {
  timeoutMs: number;
  toleranceMs: number;
}

export function healthRoutes(pool: Pool, isReady: () => boolean, { timeoutMs, toleranceMs }: HealthOptions): Router {
  const router = Router();
  const answeredLately = () => Date.now() - lastAnswer(pool) < toleranceMs;
  /** Undefined when the database answers, else the refusal. */
  const database = async (): Promise<ApiError | undefined> => {
    let timer: NodeJS.Timeout | undefined;
    // The query keeps its own bounds (the pool's acquire and query timeouts) and ends by itself.
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('health check timed out')), timeoutMs);
    });
    try {
      await Promise.race([pool.query({ name: 'health_v1', text: 'SELECT 1' }), late]);
      return undefined;
    } catch (err) {
      const gone = isConnectionFailure(err) && (err as Error).message !== 'Query read timeout';
      if (!gone && answeredLately()) return undefined;
      return new ApiError('db_unavailable', gone ? 'The database refuses connections.' : `The database does not answer within ${timeoutMs} ms.`, { retryAfterSeconds: 1 });
    } finally {
      clearTimeout(timer);
    }
  };
  // A probe's answer is about this moment: never stored by a cache between (If-None-Match is never
  // answered 304 either, app.ts).
  router.get(['/health', '/ready'], (_req, res, next) => {
    res.setHeader('Cache-Control', 'no-store');
    next();
  });
  router.get('/health', (_req, res) => {
    res.json({ ok: true });
  });
  router.get('/ready', async (_req, res) => {
    if (!isReady()) return sendError(res, new ApiError('shutting_down', 'This worker is not taking traffic.', { retryAfterSeconds: 1 }));
    const refused = await database();
    if (refused) return sendError(res, refused);
    res.json({ ok: true });
  });
  return router;
}
