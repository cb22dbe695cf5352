// deploy/cells (two cells, each deploy/k8s in a namespace of its own with tenancy on) and
// deploy/router (HAProxy in front of them), rendered by `kubectl kustomize` as an apply would:
// each cell wholly in its namespace with its own database Secret, booting with the tenancy it
// needs (the header trusted, the operator's token from a Secret), and the router's backends the
// cells' API Services by name. The router's routing itself is test/scaling/router.test.ts. Where
// kubectl is missing, the suite says it was not run (QUEEN_REQUIRE_KUBECTL=1 makes that a failure).
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { loadConfig } from '../../shared/config';
import { REPO } from '../support/processes';

const KUBECTL = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8', timeout: 20_000 }).status === 0;
const reason = KUBECTL ? undefined : 'kubectl is not installed';
if (reason && process.env.QUEEN_REQUIRE_KUBECTL === '1') throw new Error('QUEEN_REQUIRE_KUBECTL=1 but kubectl is not installed');
if (reason) process.stderr.write(`test/deploy/cells.test.ts: not run: ${reason}\n`);

function render(dir: string): any[] {
  const r = spawnSync('kubectl', ['kustomize', path.join(REPO, 'deploy', dir)], { encoding: 'utf8', timeout: 60_000 });
  if (r.status !== 0) throw new Error(`kubectl kustomize deploy/${dir}: ${r.stderr}`);
  return parseAllDocuments(r.stdout).map((d) => d.toJS());
}
const workloads = (objects: any[]) => objects.filter((o) => o.kind === 'Deployment' || o.kind === 'Job');

(reason ? describe.skip : describe)(reason ? `two cells and the router on Kubernetes: not run, ${reason}` : 'two cells and the router on Kubernetes', () => {
  const CELLS = ['cell-a', 'cell-b'];

  test.each(CELLS)('deploy/cells/%s: every object in its own namespace, tenancy on, the token and the database from its Secrets', (cell) => {
    const objects = render(`cells/${cell}`);
    const ns = `queen-${cell}`;
    for (const o of objects) {
      if (o.kind === 'Namespace') expect(o.metadata.name).toBe(ns);
      else expect({ object: `${o.kind}/${o.metadata.name}`, namespace: o.metadata.namespace }).toEqual({ object: `${o.kind}/${o.metadata.name}`, namespace: ns });
    }
    const config = objects.find((o) => o.kind === 'ConfigMap');
    expect(config.data).toMatchObject({ QUEEN_TENANCY_HEADER: '1', QUEEN_KV_TRUSTED_PROXY: '1' });
    expect(workloads(objects).map((w) => w.metadata.name).sort()).toEqual(['api', 'migrate', 'sweeper']);
    for (const w of workloads(objects)) {
      const c = w.spec.template.spec.containers[0];
      expect(c.envFrom).toEqual([{ configMapRef: { name: config.metadata.name } }]);
      const env = Object.fromEntries(c.env.map((e: any) => [e.name, e.valueFrom?.secretKeyRef]));
      expect({ workload: w.metadata.name, admin: env.QUEEN_ADMIN_TOKEN, db: env.DATABASE_URL }).toEqual({
        workload: w.metadata.name,
        admin: { name: 'queen-admin', key: 'QUEEN_ADMIN_TOKEN' },
        db: { name: 'queen-database', key: 'DATABASE_URL' },
      });
    }
    // The settings boot (with the Secrets' values in place), tenancy and all.
    const booted = loadConfig({ ...config.data, DATABASE_URL: 'postgres://queen@db.example:5432/queen', QUEEN_ADMIN_TOKEN: 'x' });
    expect(booted.tenancyHeader).toBe(true);
    expect(() => loadConfig({ ...config.data, DATABASE_URL: 'postgres://queen@db.example:5432/queen' })).toThrow(/QUEEN_ADMIN_TOKEN/);
  });

  test("deploy/router: HAProxy reads the shipped haproxy.cfg and placement.map, and its backends are the cells' API Services", () => {
    const objects = render('router');
    const config = objects.find((o) => o.kind === 'ConfigMap');
    expect(Object.keys(config.data).sort()).toEqual(['haproxy.cfg', 'placement.map']);
    const cfg: string = config.data['haproxy.cfg'];
    const servers = [...cfg.matchAll(/^\s*server (\S+) (\S+):(\d+) /gm)].map((m) => ({ backend: m[1], host: m[2], port: Number(m[3]) }));
    expect(servers.map((s) => s.backend).sort()).toEqual(CELLS);
    for (const s of servers) {
      const cell = render(`cells/${s.backend}`);
      const service = cell.find((o) => o.kind === 'Service');
      expect({ host: s.host, port: s.port }).toEqual({ host: `${service.metadata.name}.${service.metadata.namespace}.svc.cluster.local`, port: service.spec.ports[0].port });
    }
    // Every placement names a backend the configuration has.
    const placed = config.data['placement.map'].split('\n').filter((l: string) => l.trim() && !l.startsWith('#')).map((l: string) => l.trim().split(/\s+/)[1]);
    for (const b of placed) expect(CELLS).toContain(b);
    const deployment = objects.find((o) => o.kind === 'Deployment');
    const pod = deployment.spec.template.spec;
    expect(pod.volumes.find((v: any) => v.name === 'config').configMap.name).toBe(config.metadata.name);
    expect(pod.containers[0].args).toEqual(['haproxy', '-W', '-db', '-f', '/etc/haproxy/haproxy.cfg']);
    // The paths the configuration names are the ones mounted: the map, and a writable directory for the runtime socket.
    expect(cfg).toContain('map(/etc/haproxy/placement.map)');
    expect(pod.containers[0].volumeMounts).toEqual(expect.arrayContaining([{ name: 'config', mountPath: '/etc/haproxy', readOnly: true }, { name: 'run', mountPath: '/var/run/haproxy' }]));
    expect(cfg).toContain('stats socket /var/run/haproxy/admin.sock');
    // The restricted Pod Security Standard, as the cells' pods.
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } });
    expect(pod.containers[0].securityContext).toEqual({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } });
    expect(deployment.spec.replicas).toBeGreaterThanOrEqual(2);
    expect(objects.find((o) => o.kind === 'Service').spec.ports[0].port).toBe(6632);
  });
});
