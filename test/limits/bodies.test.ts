// A worker's memory for request bodies is bounded whatever clients send (services/api/edge/bodyBudget.ts):
// one body past QUEEN_MAX_BODY_BYTES is 413 before it is read, and the bodies in flight past
// QUEEN_MAX_INFLIGHT_BODY_BYTES are 503 server_busy, each answered at once with the connection closed.
// Each exchange is on a raw socket, so the test decides how much of a body is ever sent.
import { head, rawExchange } from '../support/http';
import { useApi } from '../support/api';

const MIB = 1024 * 1024;
const api = useApi({ QUEEN_MAX_BODY_BYTES: String(MIB), QUEEN_MAX_INFLIGHT_BODY_BYTES: String(2 * MIB) });
let port: number;
beforeAll(() => {
  port = api.server.port;
});

const json = { 'Content-Type': 'application/json' };

test.each([
  ['POST', '/api/v1/push'],
  ['POST', '/api/v1/kv'],
  ['PUT', '/api/v1/kv/limits/k'],
  ['POST', '/api/v1/transaction'],
  ['POST', '/api/v1/ack'],
])('%s %s: a Content-Length past the limit is answered 413 before a byte of the body is sent, and the connection closes', async (method, path) => {
  const x = rawExchange(port, head(method, path, { ...json, 'Content-Length': MIB + 1 }));
  const answer = await x.answer;
  expect(answer).toMatchObject({ status: 413, body: { error: 'payload_too_large' } });
  expect(answer.headers.connection).toBe('close');
  await x.closed;
});

test('a chunked body is refused 413 as soon as what arrived passes the limit, with no end of the body ever sent', async () => {
  const x = rawExchange(port, head('POST', '/api/v1/push', { ...json, 'Transfer-Encoding': 'chunked' }));
  const piece = Buffer.alloc(64 * 1024, 'x');
  let answered = false;
  void x.answer.then(() => (answered = true), () => (answered = true));
  // Up to twice the limit, one piece at a time, each after the server has taken the last; never the final chunk.
  for (let sent = 0; sent <= 2 * MIB && !answered; sent += piece.length) {
    if (!(await x.send(Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')])))) break;
  }
  const answer = await x.answer;
  expect(answer).toMatchObject({ status: 413, body: { error: 'payload_too_large' } });
  expect(answer.headers.connection).toBe('close');
  await x.closed;
});

test('bodies in flight past the worker\'s budget: 503 server_busy with Retry-After at once; once they are answered, the same call is served', async () => {
  // Two pushes announce 1 MiB each and send nothing yet: the whole 2 MiB budget is held.
  const body = (n: number) => {
    const text = JSON.stringify({ items: [{ queue: 'budget', payload: 'x'.repeat(n) }] });
    return text + ' '.repeat(MIB - Buffer.byteLength(text));
  };
  const held = [0, 1].map(() => rawExchange(port, head('POST', '/api/v1/push', { ...json, 'Content-Length': MIB })));
  // The server has admitted both once a request with a body answers 503 (each waits for its body meanwhile).
  const small = JSON.stringify({ items: [{ queue: 'budget', payload: 'small' }] });
  let refused;
  for (let i = 0; ; i++) {
    const x = rawExchange(port, head('POST', '/api/v1/push', { ...json, 'Content-Length': Buffer.byteLength(small) }));
    await x.send(small);
    refused = await x.answer;
    x.socket.destroy();
    if (refused.status === 503 || i > 200) break;
  }
  expect(refused).toMatchObject({ status: 503, body: { error: 'server_busy' } });
  expect(refused.headers['retry-after']).toBe('1');
  expect(refused.headers.connection).toBe('close');
  for (const x of held) await x.send(body(MIB - 200));
  for (const x of held) {
    expect((await x.answer).status).toBe(201);
    x.socket.destroy();
  }
  const after = rawExchange(port, head('POST', '/api/v1/push', { ...json, 'Content-Length': Buffer.byteLength(small) }));
  await after.send(small);
  expect((await after.answer).status).toBe(201);
  after.socket.destroy();
});
