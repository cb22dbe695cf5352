// GET /api/v1/openapi.json: the API's description (docs/openapi.yaml, written as dist/openapi.json
// by the build). Public, like the probes: it describes routes, never data. Read once, on first use.
import fs from 'node:fs';
import path from 'node:path';
import { Router } from 'express';
import { ApiError } from '../../../shared/errors';
import { sendJsonText } from '../edge/answer';

export const OPENAPI_FILE = path.resolve(__dirname, '..', '..', '..', 'openapi.json');

export function openapiRoutes(): Router {
  const router = Router();
  let text: string | undefined;
  router.get('/api/v1/openapi.json', (_req, res) => {
    try {
      text ??= fs.readFileSync(OPENAPI_FILE, 'utf8');
    } catch {
      throw new ApiError('not_found', 'This build has no API description (dist/openapi.json is made by npm run build).');
    }
    sendJsonText(res, 200, text);
  });
  return router;
}
