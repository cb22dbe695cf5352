// bench:isolation's KV flood, in its own process:
//   node dist/bench/floodLane.js <port> <reads a second> <writes a second> <seconds>
// Two open loops (reads: GET a key; writes: PUT it), each over 128 keep-alive connections with one
// request in flight per connection. Every 5 ms each loop sends what its rate says is due, each
// request on an idle connection; what finds every connection busy is sent on the next tick.
// Prints one JSON line per lane: `sent` is what the cell was offered.
//
// Written for the least CPU a request: its CPU comes out of the same two cores as the cell it
// floods, where a real flood's generator runs on other machines. So: one process for both lanes,
// each request a prebuilt buffer, answers read by byte offsets (status, Content-Length), no promise
// or string per request: 0.13-0.16 of a core for 3,000 requests a second, against 0.22-0.26 for the
// first version (lib/load.ts's promise-based raw client, a process a lane) and 0.20-0.23 for
// autocannon's CLI (the README's bench:isolation section).
import net from 'node:net';

const [port, readsPerSec, writesPerSec, seconds] = process.argv.slice(2).map(Number);
const CONNECTIONS = 128;
const HEAD_END = Buffer.from('\r\n\r\n');
const CONTENT_LENGTH = Buffer.from('content-length:');

interface Lane {
  name: 'reads' | 'writes';
  rate: number;
  request: Buffer;
  idle: Connection[];
  sent: number;
  errors: number;
  byStatus: Record<number, number>;
}

class Connection {
  private readonly socket: net.Socket;
  private pending: Buffer | undefined;

  constructor(private readonly lane: Lane) {
    this.socket = net.connect({ host: '127.0.0.1', port, noDelay: true });
    this.socket.on('data', (chunk: Buffer) => this.read(chunk));
    this.socket.on('error', () => undefined);
    this.socket.on('close', () => {
      if (this.pending !== undefined) this.lane.errors++;
    });
  }

  send(): void {
    this.pending = Buffer.alloc(0);
    this.socket.write(this.lane.request);
  }

  /** One answer per request: done when the head and Content-Length bytes of body are in. */
  private read(chunk: Buffer): void {
    const buf = this.pending && this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    const headEnd = buf.indexOf(HEAD_END);
    if (headEnd < 0) return void (this.pending = buf);
    const at = indexOfIgnoringCase(buf, CONTENT_LENGTH, headEnd);
    let length = 0;
    if (at >= 0) for (let i = at + CONTENT_LENGTH.length; i < headEnd && buf[i] !== 13; i++) if (buf[i] >= 48 && buf[i] <= 57) length = length * 10 + buf[i] - 48;
    if (buf.length < headEnd + 4 + length) return void (this.pending = buf);
    const status = (buf[9] - 48) * 100 + (buf[10] - 48) * 10 + (buf[11] - 48);
    this.lane.byStatus[status] = (this.lane.byStatus[status] ?? 0) + 1;
    this.pending = undefined;
    this.lane.idle.push(this);
  }

  close(): void {
    this.pending = undefined;
    this.socket.destroy();
  }
}

function indexOfIgnoringCase(buf: Buffer, needle: Buffer, end: number): number {
  outer: for (let i = 0; i + needle.length <= end; i++) {
    for (let j = 0; j < needle.length; j++) if ((buf[i + j] | 0x20) !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

const path = '/api/v1/kv/bench/flood-key';
const body = JSON.stringify({ value: { n: 1 }, ttlSeconds: 300 });
const lanes: Lane[] = [
  { name: 'reads', rate: readsPerSec, request: Buffer.from(`GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`) },
  {
    name: 'writes',
    rate: writesPerSec,
    request: Buffer.from(`PUT ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`),
  },
].map((l) => ({ ...(l as Pick<Lane, 'name' | 'rate' | 'request'>), idle: [], sent: 0, errors: 0, byStatus: {} }));
const all: Connection[] = [];
for (const lane of lanes) {
  if (lane.rate <= 0) continue;
  for (let i = 0; i < CONNECTIONS; i++) {
    const c = new Connection(lane);
    lane.idle.push(c);
    all.push(c);
  }
}

const started = performance.now();
const tick = setInterval(() => {
  const elapsed = performance.now() - started;
  if (elapsed >= seconds * 1000) return void finish();
  for (const lane of lanes) {
    // What is due and not sent yet stays due: after a stall the timer runs before the answers that
    // came in meanwhile are read, and dropping that backlog would flood below the offered rate.
    for (let due = Math.floor((elapsed * lane.rate) / 1000) - lane.sent; due > 0; due--) {
      const c = lane.idle.pop();
      if (!c) break;
      lane.sent++;
      c.send();
    }
  }
}, 5);

function finish(): void {
  clearInterval(tick);
  // Answers still in flight get a moment; the counts are of what came back.
  setTimeout(() => {
    const cpu = process.cpuUsage();
    const cpuSeconds = (cpu.user + cpu.system) / 1e6;
    for (const lane of lanes) {
      const { name, sent, errors, byStatus } = lane;
      process.stdout.write(`${JSON.stringify({ lane: name, sent, errors, byStatus, cpuSeconds })}\n`);
    }
    all.forEach((c) => c.close());
    process.exit(0);
  }, 200);
}
