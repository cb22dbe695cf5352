// deploy/k8s, read as the API server would read it: kinds and references that resolve, probes on
// the paths the processes serve, a grace period longer than the drain, config from the ConfigMap
// and the database URL from a Secret the kustomization never renders, pods the `restricted` Pod
// Security Standard admits, the HPA alone owning the api's replica count, the release Job. Where
// kubectl is installed, `kubectl kustomize deploy/k8s` must render and its output is checked too
// (QUEEN_REQUIRE_KUBECTL=1 makes a missing kubectl a failure). No cluster here: structure, not scheduling.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { loadConfig } from '../../shared/config';
import { REPO } from '../support/processes';

const DIR = path.join(REPO, 'deploy', 'k8s');
const files = fs.readdirSync(DIR).filter((f) => f.endsWith('.yaml'));
const docs = files.flatMap((f) =>
  parseAllDocuments(fs.readFileSync(path.join(DIR, f), 'utf8')).map((d) => {
    if (d.errors.length) throw new Error(`${f}: ${d.errors.map((e) => e.message).join('; ')}`);
    return { file: f, text: fs.readFileSync(path.join(DIR, f), 'utf8'), ...d.toJS() };
  }),
);
const find = (kind: string, name: string) => {
  const doc = docs.find((d) => d.kind === kind && d.metadata?.name === name);
  if (!doc) throw new Error(`no ${kind} ${name} in deploy/k8s`);
  return doc;
};
const kustomization = () => docs.find((d) => d.kind === 'Kustomization')!;
const procfileLine = (name: string) =>
  fs.readFileSync(path.join(REPO, 'Procfile'), 'utf8').split('\n').find((l) => l.startsWith(`${name}:`))!.slice(name.length + 1).trim();
/** Every workload with a pod template: the two Deployments and the migrate Job. */
const WORKLOADS: [string, string][] = [
  ['Deployment', 'api'],
  ['Deployment', 'sweeper'],
  ['Job', 'migrate'],
];
/** deploy/k8s/config.env as kustomize reads it: KEY=value lines, `#` comments and blank lines skipped. */
const configMap = () => ({
  data: Object.fromEntries(
    fs
      .readFileSync(path.join(DIR, 'config.env'), 'utf8')
      .split('\n')
      .filter((l) => l.trim() !== '' && !l.startsWith('#'))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  ) as Record<string, string>,
});

test('the kustomization lists every manifest, and every manifest has an apiVersion, a kind and a name', () => {
  const kustomization = docs.find((d) => d.kind === 'Kustomization')!;
  expect([...kustomization.resources].sort()).toEqual(files.filter((f) => f !== 'kustomization.yaml').sort());
  for (const d of docs) {
    expect(d.apiVersion).toBeTruthy();
    expect(d.kind).toBeTruthy();
    if (d.kind !== 'Kustomization') expect(d.metadata.name).toBeTruthy();
  }
});

test('the ConfigMap is a configuration the processes accept, without DATABASE_URL', () => {
  const data = configMap().data as Record<string, string>;
  expect(Object.values(data).every((v) => typeof v === 'string')).toBe(true);
  expect(data.DATABASE_URL).toBeUndefined();
  const config = loadConfig({ ...data, DATABASE_URL: 'postgres://queen@db.example:5432/queen' });
  expect(config.workers).toBeGreaterThan(0);
});

test('no Secret is applied by apply -k: no manifest, no generator, no placeholder; the docs say how to create it', () => {
  expect(docs.filter((d) => d.kind === 'Secret')).toEqual([]);
  expect(kustomization().secretGenerator).toBeUndefined();
  for (const d of docs) expect(d.text).not.toMatch(/CHANGE_ME/);
  const deploy = fs.readFileSync(path.join(REPO, 'docs', 'deploy.md'), 'utf8');
  expect(deploy).toContain(`kubectl -n ${kustomization().namespace} create secret generic queen-database --from-literal=DATABASE_URL=`);
});

test('the kustomization sets the namespace, which enforces the restricted Pod Security Standard, and the image', () => {
  const k = kustomization();
  expect(k.namespace).toBeTruthy();
  const ns = find('Namespace', k.namespace);
  expect(ns.metadata.labels['pod-security.kubernetes.io/enforce']).toBe('restricted');
  // No manifest pins a namespace of its own.
  for (const d of docs) expect(d.metadata?.namespace).toBeUndefined();
  const version = JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8')).version;
  expect(k.images).toEqual([{ name: 'queen-kv', newName: expect.any(String), newTag: version }]);
  for (const [kind, name] of WORKLOADS) {
    for (const c of find(kind, name).spec.template.spec.containers) expect(c.image.split(':')[0]).toBe('queen-kv');
  }
});

describe.each(WORKLOADS)('%s %s: a pod the restricted Pod Security Standard admits', (kind, name) => {
  test('non-root, RuntimeDefault seccomp, no privilege escalation, no capabilities, a read-only root', () => {
    const pod = find(kind, name).spec.template.spec;
    expect(pod.securityContext.runAsNonRoot).toBe(true);
    expect(pod.securityContext.runAsUser).toBeGreaterThan(0);
    expect(pod.securityContext.seccompProfile).toEqual({ type: 'RuntimeDefault' });
    expect(pod.hostNetwork ?? false).toBe(false);
    expect(pod.volumes ?? []).toEqual([]);
    for (const c of pod.containers) {
      expect(c.securityContext.allowPrivilegeEscalation).toBe(false);
      expect(c.securityContext.capabilities.drop).toEqual(['ALL']);
      expect(c.securityContext.capabilities.add ?? []).toEqual([]);
      expect(c.securityContext.readOnlyRootFilesystem).toBe(true);
      expect(c.securityContext.privileged ?? false).toBe(false);
    }
  });
});

test('the migrate Job runs the Procfile release line once, bounded, with the cell\'s configuration', () => {
  const job = find('Job', 'migrate');
  const pod = job.spec.template.spec;
  expect(pod.containers).toHaveLength(1);
  expect(pod.containers[0].command.join(' ')).toBe(procfileLine('release'));
  expect(pod.restartPolicy).toBe('Never');
  expect(job.spec.backoffLimit).toBeGreaterThanOrEqual(0);
  expect(job.spec.activeDeadlineSeconds).toBeGreaterThan(0);
  expect(pod.containers[0].envFrom).toEqual([{ configMapRef: { name: 'queen-config' } }]);
  expect(pod.containers[0].env).toEqual([{ name: 'DATABASE_URL', valueFrom: { secretKeyRef: { name: 'queen-database', key: 'DATABASE_URL' } } }]);
  expect(pod.containers[0].resources.limits.memory).toBeTruthy();
  expect(job.text).toContain('kubectl -n queen delete job migrate --ignore-not-found');
});

describe.each(['api', 'sweeper'])('Deployment %s', (name) => {
  const deployment = () => find('Deployment', name);
  const pod = () => deployment().spec.template.spec;
  const container = () => pod().containers[0];

  test('selector matches its pod labels; the command is its Procfile line', () => {
    const d = deployment();
    for (const [k, v] of Object.entries(d.spec.selector.matchLabels)) expect(d.spec.template.metadata.labels[k]).toBe(v);
    expect(container().command.join(' ')).toBe(procfileLine(name === 'api' ? 'web' : 'sweeper'));
  });

  test('replicas spread over zones and nodes, softly, by its own pod labels', () => {
    const labels = deployment().spec.template.metadata.labels;
    const spread = pod().topologySpreadConstraints as { topologyKey: string; whenUnsatisfiable: string; maxSkew: number; labelSelector: { matchLabels: Record<string, string> } }[];
    expect(spread.map((c) => c.topologyKey).sort()).toEqual(['kubernetes.io/hostname', 'topology.kubernetes.io/zone']);
    for (const c of spread) {
      expect(c.maxSkew).toBe(1);
      // Never a reason to leave a pod unscheduled (a one-zone cluster, a rollout's surge pod).
      expect(c.whenUnsatisfiable).toBe('ScheduleAnyway');
      expect(c.labelSelector.matchLabels).toEqual(deployment().spec.selector.matchLabels);
      for (const [k, v] of Object.entries(c.labelSelector.matchLabels)) expect(labels[k]).toBe(v);
    }
  });

  test('configuration from the ConfigMap, DATABASE_URL from the Secret and nowhere else', () => {
    expect(container().envFrom).toEqual([{ configMapRef: { name: 'queen-config' } }]);
    expect(container().env).toEqual([{ name: 'DATABASE_URL', valueFrom: { secretKeyRef: { name: 'queen-database', key: 'DATABASE_URL' } } }]);
  });

  test('probes on the paths the process serves, on a declared port; resources requested and memory bounded', () => {
    const c = container();
    const ports = c.ports.map((p: { name: string }) => p.name);
    // The API's liveness reads no database (/health): an outage must not restart it into CrashLoopBackOff.
    const paths = name === 'api' ? { readinessProbe: '/ready', livenessProbe: '/health' } : { readinessProbe: '/health', livenessProbe: '/health' };
    for (const [probe, p] of Object.entries(paths)) {
      expect(c[probe].httpGet.path).toBe(p);
      expect(ports).toContain(c[probe].httpGet.port);
    }
    const data = configMap().data;
    const port = c.ports[0].containerPort;
    expect(String(port)).toBe(name === 'api' ? data.PORT : data.QUEEN_SWEEPER_METRICS_PORT);
    expect(c.resources.requests.cpu).toBeTruthy();
    expect(c.resources.requests.memory).toBeTruthy();
    expect(c.resources.limits.memory).toBeTruthy();
  });

  test('the grace period outlasts the preStop pause plus QUEEN_SHUTDOWN_TIMEOUT_MS', () => {
    const drainSeconds = Number(configMap().data.QUEEN_SHUTDOWN_TIMEOUT_MS) / 1000;
    const preStop = container().lifecycle?.preStop?.exec?.command;
    const pause = preStop ? Number(preStop[preStop.length - 1]) : 0;
    expect(pod().terminationGracePeriodSeconds).toBeGreaterThan(pause + drainSeconds);
  });
});

test('the api is served by a Service, protected by a PodDisruptionBudget and scaled by an HPA', () => {
  const api = find('Deployment', 'api');
  const labels = api.spec.template.metadata.labels;
  const service = find('Service', 'api');
  for (const [k, v] of Object.entries(service.spec.selector)) expect(labels[k]).toBe(v);
  expect(service.spec.ports[0].targetPort).toBe('http');
  const pdb = find('PodDisruptionBudget', 'api');
  for (const [k, v] of Object.entries(pdb.spec.selector.matchLabels)) expect(labels[k]).toBe(v);
  const hpa = find('HorizontalPodAutoscaler', 'api');
  expect(pdb.spec.maxUnavailable ?? 0).toBeLessThan(hpa.spec.minReplicas);
  // The HPA alone owns the count: a replicas field would reset it at every apply.
  expect(api.spec.replicas).toBeUndefined();
  expect(hpa.apiVersion).toBe('autoscaling/v2');
  expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: 'api' });
  expect(hpa.spec.minReplicas).toBeLessThanOrEqual(hpa.spec.maxReplicas);
});

test('the HPA ceiling fits the connection budget it documents', () => {
  const data = configMap().data;
  // Each worker's share of both pools plus its two LISTEN connections (services/api/main.ts).
  const perPod = Number(data.DB_POOL_SIZE) + Number(data.QUEEN_KV_POOL_SIZE) + 2 * Number(data.QUEEN_WORKERS);
  const hpa = find('HorizontalPodAutoscaler', 'api');
  const documented = Number(/max_connections of at least (\d+)/.exec(hpa.text)![1]);
  const sweepers = find('Deployment', 'sweeper').spec.replicas;
  // Sweepers hold 4 each, the migrate Job 1, the server reserves 3 for superusers.
  expect(hpa.spec.maxReplicas * perPod + sweepers * 4 + 1 + 3).toBeLessThanOrEqual(documented);
});

test('the sweeper Deployment tells the operator it is leaderless and how to scale it', () => {
  const text = find('Deployment', 'sweeper').text;
  expect(text).toMatch(/LEADERLESS/);
  expect(text).toContain(`kubectl -n ${kustomization().namespace} scale deploy/sweeper --replicas=N`);
});

const KUBECTL = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8', timeout: 20_000 }).status === 0 ? 'kubectl' : undefined;

test('kubectl kustomize deploy/k8s renders: every object in the namespace, the image set, no Secret', () => {
  if (!KUBECTL) {
    if (process.env.QUEEN_REQUIRE_KUBECTL === '1') throw new Error('QUEEN_REQUIRE_KUBECTL=1 but kubectl is not installed');
    console.warn('kubectl is not installed: the rendering of deploy/k8s was not checked (the manifests were read as YAML above)');
    return;
  }
  const r = spawnSync(KUBECTL, ['kustomize', DIR], { encoding: 'utf8', timeout: 60_000 });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  const rendered = parseAllDocuments(r.stdout).map((d) => d.toJS());
  const k = kustomization();
  const generated = rendered.find((d) => d.kind === 'ConfigMap');
  expect(rendered.map((d) => `${d.kind}/${d.metadata.name}`).sort()).toEqual(
    [...docs.filter((d) => d.kind !== 'Kustomization').map((d) => `${d.kind}/${d.metadata.name}`), `ConfigMap/${generated?.metadata.name}`].sort(),
  );
  expect(generated.data).toEqual(configMap().data);
  for (const d of rendered) {
    if (d.kind === 'Namespace') expect(d.metadata.name).toBe(k.namespace);
    else expect(d.metadata.namespace).toBe(k.namespace);
  }
  const image = `${k.images[0].newName}:${k.images[0].newTag}`;
  for (const d of rendered.filter((x) => x.spec?.template?.spec)) {
    for (const c of d.spec.template.spec.containers) expect(c.image).toBe(image);
    expect(d.spec.template.spec.securityContext.seccompProfile).toEqual({ type: 'RuntimeDefault' });
  }
  expect(rendered.find((d) => d.kind === 'Deployment' && d.metadata.name === 'api').spec.replicas).toBeUndefined();
});

test('every pod runs as the queen-kv ServiceAccount with no API token mounted', () => {
  const account = find('ServiceAccount', 'queen-kv');
  expect(account.automountServiceAccountToken).toBe(false);
  for (const [kind, name] of WORKLOADS) {
    const pod = find(kind, name).spec.template.spec;
    expect({ workload: `${kind}/${name}`, serviceAccountName: pod.serviceAccountName, automount: pod.automountServiceAccountToken }).toEqual({
      workload: `${kind}/${name}`,
      serviceAccountName: 'queen-kv',
      automount: false,
    });
  }
});

test('NetworkPolicies: every pod denied by default, the API port open, the sweeper metrics port from Prometheus only, egress only to PostgreSQL and DNS', () => {
  const policies = docs.filter((d) => d.kind === 'NetworkPolicy');
  const labelsOf = (kind: string, name: string) => find(kind, name).spec.template.metadata.labels as Record<string, string>;
  const selects = (p: any, labels: Record<string, string>) => Object.entries(p.spec.podSelector.matchLabels ?? {}).every(([k, v]) => labels[k] === v);
  const podPort = (kind: string, name: string) => find(kind, name).spec.template.spec.containers[0].ports?.[0]?.containerPort;
  for (const [kind, name] of WORKLOADS) {
    const labels = labelsOf(kind, name);
    const mine = policies.filter((p) => selects(p, labels));
    // Denied both ways unless allowed: a policy with both types and no rule selects the pod.
    expect(mine.some((p) => p.spec.policyTypes.includes('Ingress') && p.spec.policyTypes.includes('Egress') && !p.spec.ingress && !p.spec.egress)).toBe(true);
    const ingress = mine.flatMap((p) => p.spec.ingress ?? []);
    const egress = mine.flatMap((p) => p.spec.egress ?? []);
    // Egress: TCP 5432 (PostgreSQL) to any address, and port 53 only to the cluster's DNS pods.
    expect(egress.flatMap((r: any) => r.ports.map((x: any) => `${x.protocol}/${x.port}`)).sort()).toEqual(['TCP/53', 'TCP/5432', 'UDP/53']);
    for (const r of egress.filter((r: any) => r.ports.some((x: any) => x.port === 53))) expect(r.to.every((t: any) => t.podSelector?.matchLabels?.['k8s-app'] === 'kube-dns')).toBe(true);
    if (name === 'api') {
      // The cell's clients come from anywhere, on the API port only (its /metrics included).
      expect(ingress).toEqual([{ ports: [{ protocol: 'TCP', port: podPort(kind, name) }] }]);
    } else if (name === 'sweeper') {
      // The metrics port, from Prometheus's pods only.
      expect(ingress).toHaveLength(1);
      expect(ingress[0].ports).toEqual([{ protocol: 'TCP', port: podPort(kind, name) }]);
      expect(ingress[0].from).toEqual([{ namespaceSelector: { matchLabels: expect.any(Object) }, podSelector: { matchLabels: { 'app.kubernetes.io/name': 'prometheus' } } }]);
    } else {
      expect(ingress).toEqual([]);
    }
  }
});

test('a changed setting renames the ConfigMap and so changes every pod template that reads it: apply -k rolls the pods', () => {
  // Without kubectl, the generator's shape: content-hashed names (no disableNameSuffixHash).
  const generator = kustomization().configMapGenerator;
  expect(generator).toEqual([{ name: 'queen-config', envs: ['config.env'], options: { labels: { 'app.kubernetes.io/name': 'queen-kv' } } }]);
  expect(docs.filter((d) => d.kind === 'ConfigMap')).toEqual([]);
  if (!KUBECTL) {
    if (process.env.QUEEN_REQUIRE_KUBECTL === '1') throw new Error('QUEEN_REQUIRE_KUBECTL=1 but kubectl is not installed');
    console.warn('kubectl is not installed: the ConfigMap hash was not rendered');
    return;
  }
  const render = (dir: string) => {
    const r = spawnSync(KUBECTL, ['kustomize', dir], { encoding: 'utf8', timeout: 60_000 });
    expect(r.status).toBe(0);
    const objects = parseAllDocuments(r.stdout).map((d) => d.toJS());
    const templates = Object.fromEntries(
      WORKLOADS.map(([kind, name]) => [`${kind}/${name}`, objects.find((d) => d.kind === kind && d.metadata.name === name).spec.template.spec.containers[0].envFrom]),
    );
    return { name: objects.find((d) => d.kind === 'ConfigMap').metadata.name as string, templates };
  };
  const copy = fs.mkdtempSync(path.join(os.tmpdir(), 'k8s-'));
  try {
    fs.cpSync(DIR, copy, { recursive: true });
    const before = render(copy);
    expect(before.name).toMatch(/^queen-config-[a-z0-9]+$/);
    for (const envFrom of Object.values(before.templates)) expect(envFrom).toEqual([{ configMapRef: { name: before.name } }]);
    const env = path.join(copy, 'config.env');
    fs.writeFileSync(env, fs.readFileSync(env, 'utf8').replace(/^LOG_LEVEL=.*$/m, 'LOG_LEVEL=debug'));
    const after = render(copy);
    expect(after.name).not.toBe(before.name);
    for (const envFrom of Object.values(after.templates)) expect(envFrom).toEqual([{ configMapRef: { name: after.name } }]);
  } finally {
    fs.rmSync(copy, { recursive: true, force: true });
  }
});
