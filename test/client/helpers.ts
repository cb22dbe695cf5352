// What the client suites share: a real cell (test/support/api.ts) and a client pointed at it.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Queen, type QueenOptions, type RetryInfo } from '@queen-kv/client';
import { ApiSuite, startTestApi, type TestApi, useApi } from '../support/api';
import type { SuiteOptions } from '../support/database';

export interface Cell {
  api: TestApi;
  queen: Queen;
  /** Every retry the client announced (its onRetry hook). */
  retries: RetryInfo[];
}

function clientOf(api: TestApi, options: Partial<QueenOptions>): Pick<Cell, 'queen' | 'retries'> {
  const retries: RetryInfo[] = [];
  const queen = new Queen({ url: api.url, ...options, retry: { onRetry: (r) => void retries.push(r), ...(options.retry || {}) } });
  return { queen, retries };
}

/** A cell of its own for one test; the test closes `api`. */
export async function startCell(env: Record<string, string> = {}, options: Partial<QueenOptions> = {}): Promise<Cell> {
  const api = await startTestApi(env);
  return { api, ...clientOf(api, options) };
}

/** For a suite file: the cell (useApi: the API, and a pool on its database) and a client, made in beforeAll. */
export function useCell(env: Record<string, string> = {}, options: Partial<QueenOptions> = {}, o: SuiteOptions = {}): Cell & { api: ApiSuite } {
  const cell = { api: useApi(env, o) } as Cell & { api: ApiSuite };
  beforeAll(() => void Object.assign(cell, clientOf(cell.api, options)));
  return cell;
}

export interface FaultProxy {
  url: string;
  /** The requests the proxy forwarded, in order (method, path, body as sent). */
  forwarded: Array<{ method: string; path: string; body: string }>;
  close(): Promise<void>;
}

/**
 * A proxy in front of a real cell that forwards every request, and answers the first one matching
 * `fault` with 503 and `Retry-After: 0` in place of the cell's answer: the cell stored the write,
 * the client was told "not now". That is the one case where a retry could store twice (a
 * connection lost after the commit answers 503 db_unavailable the same way), so it is the case a
 * retry's transactionIds are for. The database and the cell are the real ones.
 */
export async function faultProxy(target: string, fault: (method: string, path: string) => boolean): Promise<FaultProxy> {
  const forwarded: FaultProxy['forwarded'] = [];
  let faulted = false;
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks).toString('utf8');
    forwarded.push({ method: req.method!, path: req.url!, body });
    const answer = await fetch(target + req.url, {
      method: req.method,
      headers: { 'content-type': 'application/json' },
      body: body === '' ? undefined : body,
    });
    const text = await answer.text();
    if (!faulted && fault(req.method!, req.url!)) {
      faulted = true;
      res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '0' });
      return void res.end(JSON.stringify({ error: 'db_unavailable', message: 'The answer was lost on the way back (injected).' }));
    }
    res.writeHead(answer.status, { 'content-type': 'application/json' });
    res.end(text);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    forwarded,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
