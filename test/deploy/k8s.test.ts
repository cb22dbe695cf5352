// deploy/k8s, read as the API server would read it: kinds and references that resolve, probes on
// the paths the processes serve, a grace period longer than the drain, config from the ConfigMap
// and the database URL from the Secret only. (No cluster here: structure, not scheduling.)
import fs from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { loadConfig } from '../../shared/config';
import { REPO } from './processes';

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
const configMap = () => find('ConfigMap', 'queen-config');

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
  const secret = find('Secret', 'queen-database');
  expect(Object.keys(secret.stringData)).toEqual(['DATABASE_URL']);
  const config = loadConfig({ ...data, DATABASE_URL: secret.stringData.DATABASE_URL });
  expect(config.workers).toBeGreaterThan(0);
});

describe.each(['api', 'sweeper'])('Deployment %s', (name) => {
  const deployment = () => find('Deployment', name);
  const pod = () => deployment().spec.template.spec;
  const container = () => pod().containers[0];

  test('selector matches its pod labels; the command is its Procfile line', () => {
    const d = deployment();
    for (const [k, v] of Object.entries(d.spec.selector.matchLabels)) expect(d.spec.template.metadata.labels[k]).toBe(v);
    const procfile = fs.readFileSync(path.join(REPO, 'Procfile'), 'utf8');
    const line = procfile.split('\n').find((l) => l.startsWith(name === 'api' ? 'web:' : 'sweeper:'))!;
    expect(container().command.join(' ')).toBe(line.split(': ')[1]);
  });

  test('configuration from the ConfigMap, DATABASE_URL from the Secret and nowhere else', () => {
    expect(container().envFrom).toEqual([{ configMapRef: { name: 'queen-config' } }]);
    expect(container().env).toEqual([{ name: 'DATABASE_URL', valueFrom: { secretKeyRef: { name: 'queen-database', key: 'DATABASE_URL' } } }]);
  });

  test('probes on the paths the process serves, on a declared port; resources requested and memory bounded', () => {
    const c = container();
    const ports = c.ports.map((p: { name: string }) => p.name);
    // The API's liveness reads no database (/metrics): an outage must not restart it into CrashLoopBackOff.
    const paths = name === 'api' ? { readinessProbe: '/ready', livenessProbe: '/metrics' } : { readinessProbe: '/health', livenessProbe: '/health' };
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
  expect(pdb.spec.maxUnavailable ?? 0).toBeLessThan(api.spec.replicas);
  const hpa = find('HorizontalPodAutoscaler', 'api');
  expect(hpa.apiVersion).toBe('autoscaling/v2');
  expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: 'api' });
  expect(hpa.spec.minReplicas).toBeLessThanOrEqual(hpa.spec.maxReplicas);
});

test('the HPA ceiling fits the connection budget it documents', () => {
  const data = configMap().data;
  const perPod = Number(data.DB_POOL_SIZE) + Number(data.QUEEN_KV_POOL_SIZE);
  const hpa = find('HorizontalPodAutoscaler', 'api');
  const documented = Number(/max_connections of at least (\d+)/.exec(hpa.text)![1]);
  const sweepers = find('Deployment', 'sweeper').spec.replicas;
  expect(hpa.spec.maxReplicas * perPod + sweepers * 3).toBeLessThanOrEqual(documented);
});

test('the sweeper Deployment tells the operator it is leaderless and how to scale it', () => {
  const text = find('Deployment', 'sweeper').text;
  expect(text).toMatch(/LEADERLESS/);
  expect(text).toContain('kubectl scale deploy/sweeper --replicas=N');
});
