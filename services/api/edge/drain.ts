// The rest of a refused body: read and dropped, bounded in bytes and time, then the socket closes.
import type { ServerResponse } from 'node:http';

/**
 * After a refused body the connection is kept reading, the bytes thrown away, until the client has
 * sent at most this much more, or for at most this long, and then closed. Closing at once (node
 * does, after an answer with Connection: close) reset the connection while the client was still
 * sending: node's http client and fetch saw EPIPE or ECONNRESET, never the 413 or 503 and its
 * Retry-After (15 of 16 70 MB bodies, 2026-12-02); raw sockets and curl read it. A discarded byte
 * costs no memory, so the bound is time and traffic: a client past either is cut off as before.
 */
export const REFUSED_BODY_DRAIN = { bytes: 128 * 1024 * 1024, ms: 10_000 } as const;

/**
 * Replaces the socket's destroySoon, which node calls once the answer of a Connection: close is
 * written: the write side ends (the client has its answer), the read side goes on, dropping what
 * comes, until the client ends its side or a bound of REFUSED_BODY_DRAIN passes.
 */
export function drainThenClose(res: ServerResponse): void {
  const socket = res.socket;
  if (!socket || (socket as { [DRAINING]?: boolean })[DRAINING]) return;
  (socket as { [DRAINING]?: boolean })[DRAINING] = true;
  socket.destroySoon = function destroySoonAfterDrain(this: typeof socket) {
    let seen = 0;
    const close = () => {
      clearTimeout(timer);
      socket.destroy();
    };
    const timer = setTimeout(close, REFUSED_BODY_DRAIN.ms);
    timer.unref();
    if (socket.writable) socket.end();
    socket.on('data', (chunk: Buffer) => {
      seen += chunk.length;
      if (seen > REFUSED_BODY_DRAIN.bytes) close();
    });
    socket.once('end', close);
    socket.once('close', () => clearTimeout(timer));
    socket.resume();
    return this;
  };
}

const DRAINING = Symbol('drain.draining');
