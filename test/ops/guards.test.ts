// The guards as the transaction wire and the timer routes apply them (one call each, guards.ts).
// Those routes live on other branches; until they are merged here, two probe routes make the same
// calls against the API's own guards, switches and grants, so the answers a client would see are
// pinned down: 403 without Retry-After inside the wire, 503 with it on a route, cancels untouched.
import express from 'express';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEFAULT_TENANT } from '../../shared/config';
import { createLogger } from '../../shared/log';
import { bodyText, errorHandler, isPlainObject, parseJson, rawBody } from '../../services/api/http';
import { call, startTestApi, TestApi } from '../support/api';
import { grant } from './helpers';

let api: TestApi;
let probe: http.Server;
let probeUrl: string;

beforeAll(async () => {
  api = await startTestApi();
  const { guards } = api.server.ops;
  const app = express();
  app.post('/probe/transaction', rawBody(api.config), async (req, res) => {
    const body = parseJson(bodyText(req));
    const b = isPlainObject(body) ? body : {};
    await guards.wire(req, { kv: b.kv, timers: b.timers }, async (tenant) => void res.json({ ok: true, tenant }));
  });
  app.post('/probe/timers', rawBody(api.config), async (req, res) => {
    await guards.timers(req, { where: 'route', schedules: 1 }, async (tenant) => void res.json({ ok: true, tenant }));
  });
  app.post('/probe/timers/reschedule', rawBody(api.config), async (req, res) => {
    await guards.timers(req, { where: 'route', reschedules: 1 }, async (tenant) => void res.json({ ok: true, tenant }));
  });
  app.use(errorHandler(createLogger('probe', 'silent')));
  probe = http.createServer(app);
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', r));
  probeUrl = `http://127.0.0.1:${(probe.address() as AddressInfo).port}`;
});
afterAll(async () => {
  probe.closeAllConnections();
  await new Promise((r) => probe.close(r));
  await api.close();
});

const flip = (body: unknown) => call(api.url, 'POST', '/api/v1/system/kv-timers', body);
const wire = (body: unknown) => call(probeUrl, 'POST', '/probe/transaction', body);
const kvOp = { op: 'put', ns: 'w', key: 'k', value: 1, forever: true };

test('paused KV inside the wire is a permanent 403 kv_disabled, without Retry-After; a bundle without kv passes', async () => {
  await flip({ kv: false });
  try {
    const res = await wire({ operations: [{ type: 'push', items: [] }], kv: [kvOp] });
    expect(res.status).toBe(403);
    expect(res.body.error).toBe('kv_disabled');
    expect(res.headers.get('retry-after')).toBeNull();
    expect((await wire({ operations: [{ type: 'push', items: [] }] })).status).toBe(200);
  } finally {
    await flip({ kv: true });
  }
  expect((await wire({ kv: [kvOp] })).status).toBe(200);
});

test('paused schedule: 503 with Retry-After on a route, 403 in the wire; a cancel in the wire is never blocked; KV is unaffected', async () => {
  await flip({ timersSchedule: false });
  try {
    for (const path of ['/probe/timers', '/probe/timers/reschedule']) {
      const res = await call(probeUrl, 'POST', path, {});
      expect(res.status).toBe(503);
      expect(res.body.error).toBe('timers_schedule_disabled');
      expect(res.headers.get('retry-after')).toBe('30');
    }
    const inWire = await wire({ timers: [{ op: 'schedule', queue: 'q', payload: {}, delaySeconds: 5 }] });
    expect(inWire.status).toBe(403);
    expect(inWire.body.error).toBe('timers_schedule_disabled');
    expect(inWire.headers.get('retry-after')).toBeNull();
    expect((await wire({ timers: [{ op: 'cancel', timerId: 'x' }], kv: [kvOp] })).status).toBe(200);
  } finally {
    await flip({ timersSchedule: true });
  }
});

test('timers have their own quota dimension and their own enabled=false answer', async () => {
  await grant(api, DEFAULT_TENANT, { maxTimers: 2 });
  expect((await call(probeUrl, 'POST', '/probe/timers', {})).status).toBe(200);
  expect((await call(probeUrl, 'POST', '/probe/timers', {})).status).toBe(200);
  const over = await call(probeUrl, 'POST', '/probe/timers', {});
  expect([over.status, over.body.error, over.headers.get('retry-after')]).toEqual([403, 'timers_quota_exceeded', null]);
  // A reschedule adds no timer; the KV quota is another dimension.
  expect((await call(probeUrl, 'POST', '/probe/timers/reschedule', {})).status).toBe(200);
  expect((await wire({ kv: [kvOp] })).status).toBe(200);
  const inWire = await wire({ kv: [kvOp], timers: [{ op: 'schedule' }] });
  expect([inWire.status, inWire.body.error]).toEqual([403, 'timers_quota_exceeded']);

  await grant(api, DEFAULT_TENANT, { enabled: false });
  const disabled = await call(probeUrl, 'POST', '/probe/timers', {});
  expect([disabled.status, disabled.body.error]).toEqual([403, 'timers_disabled_for_tenant']);
  const kvDisabled = await wire({ kv: [kvOp] });
  expect([kvDisabled.status, kvDisabled.body.error]).toEqual([403, 'kv_disabled_for_tenant']);
  await grant(api, DEFAULT_TENANT, {});
});
