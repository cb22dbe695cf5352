// GET /health: the process is up and the database answers. GET /ready: and this worker takes traffic.
// Both answer within QUEEN_HEALTH_TIMEOUT_MS: a frozen database is a 503, never a probe that hangs
// (before 2026-12-01, PostgreSQL stopped with SIGSTOP held /health for as long as it was stopped).
import { Router } from 'express';
import type { Pool } from 'pg';
import { sendError } from '../edge/answer';
import { ApiError } from '../../../shared/errors';

export function healthRoutes(pool: Pool, isReady: () => boolean, timeoutMs: number): Router {
  const router = Router();
  const check = async (res: import('express').Response, ready: boolean) => {
    let timer: NodeJS.Timeout | undefined;
    // The query keeps its own bounds (the pool's acquire and query timeouts) and ends by itself.
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('health check timed out')), timeoutMs);
    });
    try {
      await Promise.race([pool.query({ name: 'health_v1', text: 'SELECT 1' }), late]);
    } catch {
      return sendError(res, new ApiError('db_unavailable', `The database does not answer within ${timeoutMs} ms.`, { retryAfterSeconds: 1 }));
    } finally {
      clearTimeout(timer);
    }
    if (!ready) return sendError(res, new ApiError('shutting_down', 'This worker is not taking traffic.', { retryAfterSeconds: 1 }));
    res.json({ ok: true });
  };
  router.get('/health', (_req, res) => check(res, true));
  router.get('/ready', (_req, res) => check(res, isReady()));
  return router;
}
