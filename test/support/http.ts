// HTTP for tests: `call` (fetch with a JSON body, the answer parsed and its raw text kept), `request`
// (node:http, for what fetch hides: one connection a request so node:cluster spreads them, a
// keep-alive agent, a path sent byte for byte, a bound on a silent socket), and `rawExchange` (a
// socket of its own, for a test that decides what of the body is sent and when). `call` and
// `request` answer the same shape.
import http from 'node:http';
import net from 'node:net';

export interface JsonResponse<T = any> {
  status: number;
  headers: Headers;
  text: string;
  /** The text parsed as JSON; undefined when it is empty or not JSON. */
  body: T;
}

function parsed(text: string): any {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

/** fetch with a JSON (or raw text) body; the answer parsed, and its raw text kept for exactness checks. */
export async function call<T = any>(
  base: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<JsonResponse<T>> {
  const init: RequestInit = { method, headers: { 'content-type': 'application/json', ...headers } };
  if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
  const res = await fetch(base + path, init);
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: parsed(text) };
}

/** POST /api/v1/kv with these operations. */
export function kv<T = any>(base: string, operations: unknown, headers?: Record<string, string>) {
  return call<T>(base, 'POST', '/api/v1/kv', { operations }, headers);
}

export interface RequestOptions {
  /** A string or a Buffer goes on the wire as it is; anything else as JSON. */
  body?: unknown;
  headers?: Record<string, string>;
  /** A keep-alive agent; by default none, so every request has a connection of its own. */
  agent?: http.Agent | false;
  /** How long the socket may stay silent before the request fails with ETIMEDOUT (default 10 s; a long poll asks for more). */
  timeoutMs?: number;
}

/**
 * One request through node:http to 127.0.0.1 (`target`: a port, or a base URL). Without an agent it
 * has a connection of its own, so under node:cluster the kernel-balanced accept hands successive
 * requests to different workers; the path goes on the wire byte for byte (fetch would normalise it).
 * Rejects on a connection error, with the error's code (ECONNREFUSED, ECONNRESET, ETIMEDOUT...).
 */
export function request(target: number | string, method: string, path: string, o: RequestOptions = {}): Promise<JsonResponse> {
  const { hostname, port } = typeof target === 'number' ? { hostname: '127.0.0.1', port: String(target) } : new URL(target);
  const payload = o.body === undefined || typeof o.body === 'string' || Buffer.isBuffer(o.body) ? (o.body as string | Buffer | undefined) : JSON.stringify(o.body);
  const headers = payload === undefined ? { ...o.headers } : { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(payload)), ...o.headers };
  return new Promise((resolve, reject) => {
    const req = http.request({ hostname, port, method, path, agent: o.agent ?? false, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        const answered = new Headers();
        for (const [k, v] of Object.entries(res.headers)) for (const one of Array.isArray(v) ? v : v === undefined ? [] : [v]) answered.append(k, one);
        resolve({ status: res.statusCode ?? 0, headers: answered, text, body: parsed(text) });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    // A connection the cluster primary handed to a worker that was just killed may never be answered.
    const timeoutMs = o.timeoutMs ?? 10_000;
    req.setTimeout(timeoutMs, () => req.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })));
    req.end(payload);
  });
}

/** A request's outcome as a load test counts it: the status, or the connection error's code. */
export function outcome(answer: Promise<JsonResponse>): Promise<{ status: number; error?: string }> {
  return answer.then(
    (a) => ({ status: a.status, error: a.body?.error }),
    (e: NodeJS.ErrnoException) => ({ status: 0, error: e.code ?? e.message }),
  );
}

export interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: any;
}

export interface RawExchange {
  socket: net.Socket;
  /** The first answer on the socket, parsed; rejects if the socket closes before one arrives. */
  answer: Promise<RawAnswer>;
  /** Resolves when the server ended or closed the connection. */
  closed: Promise<void>;
  /** Writes and waits until the socket took it; false once the socket cannot be written (the server closed it). */
  send(data: string | Buffer): Promise<boolean>;
}

/** A raw HTTP/1.1 exchange on a socket of its own: `head` is sent now, the body when the test says. */
export function rawExchange(port: number, head: string): RawExchange {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => undefined);
  let received = Buffer.alloc(0);
  let resolveAnswer!: (a: RawAnswer) => void;
  let rejectAnswer!: (e: Error) => void;
  const answer = new Promise<RawAnswer>((resolve, reject) => {
    resolveAnswer = resolve;
    rejectAnswer = reject;
  });
  const closed = new Promise<void>((resolve) => {
    socket.once('end', resolve);
    socket.once('close', () => {
      resolve();
      rejectAnswer(new Error(`the connection closed with no complete answer: ${JSON.stringify(received.toString().slice(0, 200))}`));
    });
  });
  socket.on('data', (d: Buffer) => {
    received = Buffer.concat([received, d]);
    const text = received.toString('latin1');
    const end = text.indexOf('\r\n\r\n');
    if (end < 0) return;
    const [statusLine, ...lines] = text.slice(0, end).split('\r\n');
    const headers: Record<string, string> = {};
    for (const l of lines) headers[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
    const length = Number(headers['content-length'] ?? 0);
    const body = received.subarray(end + 4);
    if (body.length < length) return;
    const bodyText = body.subarray(0, length).toString('utf8');
    resolveAnswer({ status: Number(statusLine.split(' ')[1]), headers, body: bodyText ? JSON.parse(bodyText) : undefined });
  });
  socket.write(head);
  const send = (data: string | Buffer) =>
    new Promise<boolean>((resolve) => {
      if (socket.destroyed || !socket.writable) return resolve(false);
      socket.write(data, (err) => resolve(!err));
    });
  return { socket, answer, closed, send };
}

/** A request head for rawExchange. */
export function head(method: string, path: string, headers: Record<string, string | number>): string {
  return `${method} ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
}
