// One lane of bench:isolation's KV flood, in its own process:
//   node dist/bench/floodLane.js <port> <reads|writes> <requests a second> <seconds>
// An open loop: every 5 ms it sends what the rate says is due, each request on an idle one of 64
// keep-alive connections (lib/load.ts's raw client: about 13 µs of CPU a request, against 28-37 µs
// for autocannon, whose CPU is taken from the same two cores as the cell it floods). A request that
// finds every connection busy is counted as unsent, never queued. Prints one JSON line.
import { rawClient, HttpClient } from './lib/load';

const [port, lane, rate, seconds] = process.argv.slice(2);
const CONNECTIONS = 64;
const path = '/api/v1/kv/bench/flood-key';
const body = lane === 'writes' ? JSON.stringify({ value: { n: 1 }, ttlSeconds: 300 }) : undefined;
const method = lane === 'writes' ? 'PUT' : 'GET';

const idle: HttpClient[] = Array.from({ length: CONNECTIONS }, () => rawClient('127.0.0.1', Number(port)));
const all = [...idle];
const byStatus: Record<string, number> = {};
let sent = 0;
let unsent = 0;
let errors = 0;

function send(client: HttpClient): void {
  sent++;
  client.request(method, path, body).then(
    (a) => {
      byStatus[a.status] = (byStatus[a.status] ?? 0) + 1;
      idle.push(client);
    },
    () => {
      errors++;
      idle.push(client);
    },
  );
}

const started = performance.now();
const durationMs = Number(seconds) * 1000;
const tick = setInterval(() => {
  const elapsed = performance.now() - started;
  if (elapsed >= durationMs) return void finish();
  const due = Math.floor((elapsed * Number(rate)) / 1000) - sent - unsent;
  for (let i = 0; i < due; i++) {
    const client = idle.pop();
    if (client) send(client);
    else unsent++;
  }
}, 5);

function finish(): void {
  clearInterval(tick);
  // Answers still in flight get a moment; the counts are of what came back.
  setTimeout(() => {
    const cpu = process.cpuUsage();
    process.stdout.write(`${JSON.stringify({ sent, unsent, errors, byStatus, cpuSeconds: (cpu.user + cpu.system) / 1e6 })}\n`);
    all.forEach((c) => c.close());
    process.exit(0);
  }, 200);
}
