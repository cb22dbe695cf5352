// One API worker: pools, app, HTTP server, and a close that drains. Used by main.ts for each
// cluster worker and by the tests in-process.
import cluster from 'node:cluster';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import client from 'prom-client';
import { directUrl, type Config } from '../../shared/config';
import { createPools, Pools, PoolSizes } from '../../shared/db';
import { ApiError } from '../../shared/errors';
import type { Logger } from '../../shared/log';
import { ApiMetrics, createApiMetrics, primeApiMetrics } from '../../shared/metrics';
import { createApp, OpsHandles } from './app';
import { BodyBudget } from './edge/bodyBudget';
import { workerMetricsSource } from './clusterMetrics';
import { Guards } from './admission/guards';
import { sendError } from './edge/answer';
import { Switches } from './switches/switches';
import { TenantBook } from './admission/tenantBook';

export interface ApiServer {
  url: string;
  port: number;
  pools: Pools;
  metrics: ApiMetrics;
  ops: OpsHandles;
  /** Stops accepting connections (the first step of close(), which then skips its pause). */
  stopListening(): void;
  close(): Promise<void>;
}

export async function startApiServer(config: Config, log: Logger, sizes: PoolSizes, port = config.port): Promise<ApiServer> {
  const pools = createPools(config, sizes, 'queen-api');
  const metrics = createApiMetrics();
  primeApiMetrics(metrics);
  client.collectDefaultMetrics({ register: metrics.register });
  // The pool gauges are sampled when scraped: a read of three integers, nothing on the request path.
  const refresh = () => {
    metrics.kvPoolInUse.set(pools.kv.totalCount - pools.kv.idleCount);
    metrics.kvPoolWaiting.set(pools.kv.waitingCount);
  };
  const metricsText = cluster.isWorker
    ? workerMetricsSource(metrics.register, refresh)
    : () => (refresh(), metrics.register.metrics());
  const switches = new Switches(pools.message, directUrl(config), log, metrics);
  const book = new TenantBook(pools.message, config.kvRequireGrant, log);
  // Both read the database before the first request, so a paused cell never serves one call open.
  await Promise.all([switches.start(), book.start()]);
  const guards = new Guards({ config, kvPool: pools.kv, switches, book, metrics, log });
  const ops = { switches, book, guards };
  let ready = true;
  let draining = false;
  const budget = new BodyBudget(config);
  const app = createApp({ config, pools, log, metrics, isReady: () => ready, metricsText, ops, bodyChunk: (req, chunk) => budget.chunk(req, chunk) });
  // requireHostHeader off: node's own refusal of an HTTP/1.1 request without Host is a bare 400 with
  // no body; the request listener refuses it instead, in JSON.
  const options = { IncomingMessage: app.IncomingMessage, ServerResponse: app.ServerResponse, requireHostHeader: false };
  // A request line in absolute form (`GET http://host/path`, RFC 9112 section 3.2.2, which a server
  // must accept) becomes its origin form here, once: the KV and push routes, answered before Express,
  // match the path as it arrives, and would answer a 404 for a call Express's routes serve.
  const ABSOLUTE_FORM = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*(.*)$/is;
  const server = http.createServer(options, (req, res) => handle(req, res, false));
  /** `admitted`: the body budget already took it (an Expect: 100-continue, below). */
  const handle = (req: http.IncomingMessage, res: http.ServerResponse, admitted: boolean) => {
    // A request that arrives during the drain is answered and its connection closed after it.
    if (draining) res.shouldKeepAlive = false;
    if (req.httpVersion === '1.1' && req.headers.host === undefined) {
      res.shouldKeepAlive = false;
      return sendError(res, new ApiError('bad_request', 'An HTTP/1.1 request carries a Host header (RFC 9112, section 3.2).'));
    }
    const absolute = ABSOLUTE_FORM.exec(req.url ?? '');
    if (absolute) req.url = absolute[1].startsWith('/') ? absolute[1] : `/${absolute[1]}`;
    if (!admitted && budget.refuse(req, res)) return;
    app.handle(req, res);
  };
  // Expect: 100-continue: a body the budget refuses is refused before the client is told to send it.
  server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (budget.refuse(req, res)) return;
    res.writeContinue();
    handle(req, res, true);
  });
  server.keepAliveTimeout = 65_000;
  const drain = gracefulIdleClose(server);
  server.on('clientError', answerClientError);
  // Node answers an Expect it does not know (anything but 100-continue) with a bare 417, and a
  // CONNECT by closing the socket; both get a JSON answer here. The connection closes after either:
  // a body the client sends behind the refused Expect would otherwise be read as the next request.
  server.on('checkExpectation', (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.shouldKeepAlive = false;
    sendError(res, new ApiError('expectation_failed', 'The only Expect this cell answers is 100-continue.'));
  });
  server.on('connect', (_req: http.IncomingMessage, socket: Duplex) => {
    endWithJson(socket, new ApiError('bad_request', 'This cell is not a proxy: CONNECT is not served.'));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, resolve);
  });
  const bound = (server.address() as AddressInfo).port;
  let closing: Promise<void> | undefined;
  let listenerClosed: Promise<void> | undefined;
  let listenerClosedEarly = false;
  const stopListening = () => (listenerClosed ??= new Promise<void>((resolve) => server.close(() => resolve())));
  return {
    url: `http://127.0.0.1:${bound}`,
    port: bound,
    pools,
    metrics,
    ops,
    stopListening() {
      if (!listenerClosed) listenerClosedEarly = true;
      void stopListening();
    },
    close() {
      closing ??= (async () => {
        ready = false;
        const started = Date.now();
        // The listener stops first: a client told below to reconnect finds no listener (refused)
        // rather than one that closes with its connection still queued (reset). Under node:cluster
        // the port closes when the last worker leaves it: the primary has every worker stop
        // listening before it signals any (main.ts); signalled otherwise (a process group's
        // SIGTERM), the pause lets the siblings, signalled at the same moment, stop theirs.
        const closed = stopListening();
        if (!listenerClosedEarly) await new Promise((r) => setTimeout(r, LISTENER_GRACE_MS));
        draining = true;
        drain.start();
        await app.close();
        // Keep-alive connections whose in-flight request finishes later become idle later; the
        // sweep closes those idle for a sweep interval (gracefulIdleClose).
        const sweepIdle = setInterval(() => server.closeIdleConnections(), IDLE_SWEEP_MS);
        // The worker's share of QUEEN_SHUTDOWN_TIMEOUT_MS; the primary SIGKILLs at the full timeout.
        const deadline = setTimeout(() => {
          log.warn({ afterMs: Date.now() - started }, 'drain deadline reached: closing the connections still open');
          server.closeAllConnections();
        }, Math.max(0, Math.floor(config.shutdownTimeoutMs * 0.8) - (Date.now() - started)));
        await closed;
        clearInterval(sweepIdle);
        clearTimeout(deadline);
        book.stop();
        await switches.close();
        await pools.end();
      })();
      return closing;
    },
  };
}

/** How long a draining worker waits, listener closed, before it asks clients to go (see close()). */
const LISTENER_GRACE_MS = 100;
/** How often the drain looks for idle keep-alive connections. */
const IDLE_SWEEP_MS = 100;
/**
 * How long a keep-alive connection must have stayed idle before the drain closes it. 100 ms reset a
 * request 1 time in 64 clients' worth of a run at load average 15-20 (a client scheduled late looks
 * idle); a second leaves that race to clients that really paused, at the cost of a second more
 * before an idle client's socket goes.
 */
const IDLE_CLOSE_MS = 1000;

/**
 * A drain that resets no request. Before (2026-12-01), SIGTERM under keep-alive load reset 15 of
 * 23,409 requests (ECONNRESET, "socket hang up"): the requests in flight were answered keep-alive,
 * their clients sent the next request on the same socket, and node's server.close() (which destroys
 * every idle connection at once) and the 100 ms sweep closed that socket under it.
 *
 * Now (close() above): the listener stops first, so a client that reconnects is refused rather than
 * queued on a port about to close; then every answer not yet written carries `Connection: close`
 * (those in flight and every later one), so a client stops reusing its socket the moment it reads
 * the answer; and an idle keep-alive socket is closed only once it has stayed idle (no request, no
 * byte read) for IDLE_CLOSE_MS, so a client already writing its next request on it is answered
 * rather than cut. What remains is HTTP/1.1's own race: a client that sends on a socket idle for
 * IDLE_CLOSE_MS or more at the instant it closes. Installed as the server's closeIdleConnections.
 */
function gracefulIdleClose(server: http.Server): { start(): void } {
  type HttpSocket = Socket & { _httpMessage?: http.ServerResponse | null };
  const sockets = new Set<HttpSocket>();
  server.on('connection', (socket: HttpSocket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  let draining = false;
  /** When a sweep first saw each socket idle, and the bytes it had read then. */
  const seenIdle = new WeakMap<HttpSocket, { at: number; bytesRead: number }>();
  const closeIdle = () => {
    const now = Date.now();
    for (const socket of sockets) {
      const answering = socket._httpMessage;
      const seen = seenIdle.get(socket);
      if (answering) {
        if (!answering.headersSent) answering.shouldKeepAlive = false;
        seenIdle.delete(socket);
      } else if (seen && seen.bytesRead === socket.bytesRead) {
        if (now - seen.at >= IDLE_CLOSE_MS) socket.destroy();
      } else {
        seenIdle.set(socket, { at: now, bytesRead: socket.bytesRead });
      }
    }
  };
  // server.close() calls this at once, and node's own closes every idle socket there and then.
  // Only the drain closes connections here, by its sweeps.
  server.closeIdleConnections = () => {
    if (draining) closeIdle();
  };
  return {
    start() {
      draining = true;
      closeIdle();
    },
  };
}

/**
 * A request node's HTTP parser refuses before any route sees it (a URL or headers past node's 16 KiB
 * header limit, a malformed request line, a raw non-ASCII byte in the path): node 20's own answer is
 * a bare `431` or `400` with an empty body, and on a keep-alive connection that already carried a
 * response, none at all (it checks bytesWritten === 0): the client sees "socket hang up". The house
 * rule is a JSON error body for every refusal, so write the status with one, unless a response is
 * part-way out on this socket (later node's own rule), where a write would corrupt it.
 */
function answerClientError(err: Error & { code?: string }, socket: Duplex): void {
  const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
  if (err.code === 'ECONNRESET' || !socket.writable || inFlight?.headersSent) {
    socket.destroy();
    return;
  }
  const refusal =
    err.code === 'HPE_HEADER_OVERFLOW'
      ? new ApiError('headers_too_large', 'The request line and headers are larger than this cell accepts (16 KiB).')
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? new ApiError('request_timeout', 'The request did not arrive in time.')
        : new ApiError('bad_request', 'The request is not valid HTTP/1.1.');
  endWithJson(socket, refusal);
}

/** A refusal written straight to a socket no response object owns, and the connection closed. */
function endWithJson(socket: Duplex, refusal: ApiError): void {
  const body = JSON.stringify(refusal.body());
  socket.end(
    `HTTP/1.1 ${refusal.status} ${http.STATUS_CODES[refusal.status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
  // end() lets the answer reach the client before the close (node destroys at once); a client that
  // never closes its side must not keep the socket, so it goes shortly after either way.
  setTimeout(() => socket.destroy(), 2000).unref();
}

/**
 * How the process's connection budget is split among its workers: DB_POOL_SIZE and
 * QUEEN_KV_POOL_SIZE are budgets of the whole API process (a cell), not of each worker.
 */
export function poolSizesPerWorker(config: Config): PoolSizes {
  return {
    message: Math.max(2, Math.floor(config.dbPoolSize / config.workers)),
    kv: Math.max(1, Math.ceil(config.kvPoolSize / config.workers)),
  };
}
