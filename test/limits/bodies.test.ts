// A worker's memory for request bodies is bounded whatever clients send (services/api/edge/bodyBudget.ts):
// one body past QUEEN_MAX_BODY_BYTES is 413 before it is read, and the bodies in flight past
// QUEEN_MAX_INFLIGHT_BODY_BYTES are 503 server_busy, each answered at once with the connection closed.
// Each exchange is on a raw socket, so the test decides how much of a body is ever sent.
import http from 'node:http';
import net from 'node:net';
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

// Node's own clients send a whole body before reading an answer. The cell closed the connection
// right after its 413 while they were still sending: they saw EPIPE or ECONNRESET, never the answer.
// Now the rest of the body is read and dropped (up to REFUSED_BODY_DRAIN, edge/drain.ts) before the close.
describe("a refused body reaches node's clients as its answer, not a dropped connection", () => {
  const big = Buffer.alloc(64 * MIB, 'x');
  const viaHttp = (headers: Record<string, string | number>, chunked: boolean) =>
    new Promise<{ status: number; error: string; connection?: string }>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, method: 'POST', path: '/api/v1/push', agent: false, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, error: JSON.parse(Buffer.concat(chunks).toString()).error, connection: res.headers.connection }));
      });
      req.on('error', reject);
      if (!chunked) return req.end(big);
      // In pieces, as a stream producer would write them.
      for (let at = 0; at < big.length; at += 256 * 1024) req.write(big.subarray(at, at + 256 * 1024));
      req.end();
    });

  test.each([1, 2, 3])('http.request, Content-Length past the limit (run %s): 413 payload_too_large is read', async () => {
    expect(await viaHttp({ ...json, 'Content-Length': big.length }, false)).toEqual({ status: 413, error: 'payload_too_large', connection: 'close' });
  });

  test.each([1, 2, 3])('http.request, a chunked body past the limit (run %s): 413 payload_too_large is read', async () => {
    expect(await viaHttp({ ...json, 'Transfer-Encoding': 'chunked' }, true)).toEqual({ status: 413, error: 'payload_too_large', connection: 'close' });
  });

  test.each([1, 2, 3])('fetch, a body past the limit (run %s): 413 payload_too_large is read', async () => {
    const res = await fetch(`http://127.0.0.1:${port}/api/v1/push`, { method: 'POST', headers: json, body: big });
    expect([res.status, ((await res.json()) as { error: string }).error]).toEqual([413, 'payload_too_large']);
  });
});

test('after a 413 the cell goes on reading the body it refused (dropping it), then closes once the client ends its side', async () => {
  const length = 8 * MIB;
  // Half-open allowed: the client keeps sending after the cell's side has ended, as node's clients do.
  const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
  let reset = '';
  socket.on('error', (e: NodeJS.ErrnoException) => (reset = e.code ?? e.message));
  let received = '';
  socket.on('data', (d: Buffer) => (received += d.toString('latin1')));
  const ended = new Promise((resolve) => socket.once('end', resolve));
  const gone = new Promise((resolve) => socket.once('close', resolve));
  socket.write(head('POST', '/api/v1/push', { ...json, 'Content-Length': length }));
  await ended; // the cell's side is done: its answer is all it sends
  expect(received).toMatch(/^HTTP\/1\.1 413 [^]*"error":"payload_too_large"/);
  // The body, sent after the answer: every piece is taken. Before, the socket was gone by now and
  // the writes were reset, which is what node's clients reported instead of the answer.
  const piece = Buffer.alloc(256 * 1024, 'x');
  const taken: boolean[] = [];
  for (let sent = 0; sent < length && !reset; sent += piece.length) {
    taken.push(await new Promise<boolean>((resolve) => socket.write(piece, (err) => resolve(!err))));
  }
  expect({ taken: taken.length > 0 && taken.every(Boolean), reset }).toEqual({ taken: true, reset: '' });
  socket.end();
  await gone;
});
