// The load side of the benchmarks: a closed loop of N concurrent clients for a fixed time, each
// client awaiting its answer before it asks again, latency per request from hrtime, operations
// counted separately (a 100-put request is 100 operations). Two HTTP clients: a raw keep-alive
// socket that writes a prebuilt request and reads a Content-Length answer (the cheapest we could
// write), and node:http with a keep-alive Agent (what most Node callers use). Autocannon is driven
// by bench/kv.ts directly. Which is cheapest is measured by `node dist/bench/kv.js --client-check`.
import http from 'node:http';
import net from 'node:net';

export interface PointResult {
  ops: number;
  requests: number;
  errors: number;
  seconds: number;
  /** Request latencies in microseconds, sorted. */
  p50Us: number;
  p99Us: number;
  firstError?: string;
}

/**
 * A task sends one request and resolves with how many operations it carried (0 = refused); a
 * negative count ends that client's loop (a finite supply ran out) without counting a request.
 */
export type Task = () => Promise<number>;

export async function closedLoop(concurrency: number, durationMs: number, makeTask: (client: number) => Task): Promise<PointResult> {
  const lat: number[] = [];
  let ops = 0;
  let requests = 0;
  let errors = 0;
  let firstError: string | undefined;
  const started = process.hrtime.bigint();
  const deadline = started + BigInt(durationMs) * 1_000_000n;
  const loops = Array.from({ length: concurrency }, async (_, c) => {
    const task = makeTask(c);
    for (;;) {
      const t0 = process.hrtime.bigint();
      if (t0 >= deadline) return;
      try {
        const n = await task();
        if (n < 0) return;
        if (n > 0) ops += n;
        else errors++;
      } catch (err) {
        errors++;
        firstError ??= String((err as Error)?.message ?? err);
        if (errors > 1000 && ops === 0) throw new Error(`every request fails: ${firstError}`);
      }
      requests++;
      lat.push(Number(process.hrtime.bigint() - t0) / 1000);
    }
  });
  await Promise.all(loops);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  lat.sort((a, b) => a - b);
  const q = (p: number) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] : NaN);
  return { ops, requests, errors, seconds, p50Us: q(0.5), p99Us: q(0.99), firstError };
}

export interface HttpAnswer {
  status: number;
  body: string;
}

export interface HttpClient {
  request(method: string, path: string, body?: string): Promise<HttpAnswer>;
  close(): void;
}

/** Client `client`'s `i`-th request of a workload. */
export interface Workload {
  name: string;
  request(client: number, i: number): { method: string; path: string; body?: string };
}

/**
 * A closed loop over `clients`, one loop a client, each sending its own numbered run of the
 * workload's requests; an answer below 300 counts as one operation, any other as refused.
 */
export function workloadLoop(clients: HttpClient[], durationMs: number, w: Workload): Promise<PointResult> {
  const seq = new Array(clients.length).fill(0);
  return closedLoop(clients.length, durationMs, (c) => async () => {
    const q = w.request(c, seq[c]++);
    const a = await clients[c].request(q.method, q.path, q.body);
    return a.status < 300 ? 1 : 0;
  });
}

/**
 * One keep-alive connection speaking just enough HTTP/1.1: a request built as one string, an
 * answer read by Content-Length. No pipelining: one request in flight per client, like a caller.
 */
export function rawClient(host: string, port: number, headers: Record<string, string> = {}): HttpClient {
  // Headers every request carries (a tenant's), written once.
  const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('');
  let socket: net.Socket | undefined;
  let buf: Buffer = Buffer.alloc(0);
  let pending: { resolve: (a: HttpAnswer) => void; reject: (e: Error) => void } | undefined;

  const fail = (err: Error) => {
    socket = undefined;
    buf = Buffer.alloc(0);
    const p = pending;
    pending = undefined;
    p?.reject(err);
  };
  const parse = () => {
    if (!pending) return;
    const end = buf.indexOf('\r\n\r\n');
    if (end < 0) return;
    const head = buf.toString('latin1', 0, end);
    const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    if (!m) return fail(new Error(`answer without Content-Length: ${head.slice(0, 200)}`));
    const len = Number(m[1]);
    if (buf.length < end + 4 + len) return;
    const status = Number(head.slice(9, 12));
    const body = buf.toString('utf8', end + 4, end + 4 + len);
    buf = buf.subarray(end + 4 + len);
    const p = pending;
    pending = undefined;
    p.resolve({ status, body });
  };
  const connect = () => {
    const s = net.connect({ host, port, noDelay: true });
    s.on('data', (chunk: Buffer) => {
      buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
      parse();
    });
    s.on('error', (e) => fail(e));
    s.on('close', () => fail(new Error('connection closed')));
    return s;
  };
  return {
    request(method, path, body) {
      socket ??= connect();
      const head =
        body === undefined
          ? `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n`
          : `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\n${extra}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
      return new Promise((resolve, reject) => {
        pending = { resolve, reject };
        socket!.write(head);
      });
    },
    close() {
      socket?.destroy();
      socket = undefined;
    },
  };
}

/** node:http with a keep-alive Agent of one socket per client. */
export function agentClient(host: string, port: number): HttpClient {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  return {
    request(method, path, body) {
      return new Promise((resolve, reject) => {
        const req = http.request(
          { host, port, method, path, agent, headers: body === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
            res.on('error', reject);
          },
        );
        req.on('error', reject);
        req.end(body);
      });
    },
    close() {
      agent.destroy();
    },
  };
}
