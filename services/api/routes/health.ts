// GET /health: the process is up and the database answers. GET /ready: and this worker takes traffic.
import { Router } from 'express';
import type { Pool } from 'pg';
import { sendError } from '../http';
import { ApiError } from '../../../shared/errors';

export function healthRoutes(pool: Pool, isReady: () => boolean): Router {
  const router = Router();
  const check = async (res: import('express').Response, ready: boolean) => {
    try {
      await pool.query({ name: 'health_v1', text: 'SELECT 1' });
    } catch {
      return sendError(res, new ApiError('db_unavailable', 'The database does not answer.', { retryAfterSeconds: 1 }));
    }
    if (!ready) return sendError(res, new ApiError('shutting_down', 'This worker is not taking traffic.', { retryAfterSeconds: 1 }));
    res.json({ ok: true });
  };
  router.get('/health', (_req, res) => check(res, true));
  router.get('/ready', (_req, res) => check(res, isReady()));
  return router;
}
