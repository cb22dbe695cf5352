// The sweeper's own Prometheus endpoint, a separate little app (the API's /metrics is the API's).
// Port 0 binds an ephemeral port; the bound one is what the caller logs.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import { ApiError } from '../../shared/errors';

export interface MetricsServer {
  port: number;
  close(): Promise<void>;
}

export async function startMetricsServer(register: Registry, port: number): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'GET' && (path === '/metrics' || path === '/metrics/prometheus')) {
      register.metrics().then(
        (text) => res.writeHead(200, { 'content-type': register.contentType }).end(text),
        () => refuse(res, new ApiError('metrics_unavailable', 'Metrics could not be collected; retry shortly.')),
      );
      return;
    }
    if (req.method === 'GET' && path === '/health') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      return;
    }
    refuse(res, new ApiError('not_found', `No route for ${req.method} ${path}.`));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, resolve);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The same JSON refusal the API answers, from the same table of codes. */
function refuse(res: http.ServerResponse, err: ApiError): void {
  res.writeHead(err.status, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify(err.body()));
}
