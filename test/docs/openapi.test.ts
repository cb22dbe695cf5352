// docs/openapi.yaml cannot drift from the API: it is a valid OpenAPI 3.1 document (linted by
// @seriousme/openapi-schema-validator), it names every route the app serves and no other, only error
// codes of shared/errors.ts (each under the status the table gives it), and the answers the cell
// really gives match its schemas (Ajv, JSON Schema 2020-12, the dialect of OpenAPI 3.1).
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import ts from 'typescript';
import { parse } from 'yaml';
import { createApp } from '../../services/api/app';
import { errorCodes, statusOf } from '../../shared/errors';
import { createLogger } from '../../shared/log';
import { startTestApi, TestApi } from '../support/api';
import { call, JsonResponse } from '../support/http';

const ROOT = path.resolve(__dirname, '../../..');
const doc = parse(fs.readFileSync(path.join(ROOT, 'docs/openapi.yaml'), 'utf8'));
const METHODS = ['get', 'put', 'post', 'delete', 'head', 'patch', 'options'];
// Inside the transaction wire a paused KV or timer schedule is 403, not its route's 503 (errors.ts).
const OVERRIDDEN = new Map([['kv_disabled', 403], ['timers_schedule_disabled', 403]]);

type Schema = Record<string, unknown> | boolean;

// The document is one schema resource: a `$ref: '#/components/...'` anywhere resolves in it. Its
// OpenAPI-only keywords (example, discriminator, x-*) are annotations, not assertions.
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const DOC_ID = 'https://queen-kv.invalid/openapi.json';
ajv.addSchema({ $id: DOC_ID, components: doc.components, paths: doc.paths } as any);

/** Where `schema` sits in the document, as a JSON pointer, so that Ajv compiles it in place (its refs resolve). */
function pointerOf(target: unknown): string | undefined {
  const seen = new Set<unknown>();
  const walk = (node: any, at: string): string | undefined => {
    if (node === target) return at;
    if (node === null || typeof node !== 'object' || seen.has(node)) return undefined;
    seen.add(node);
    for (const [k, v] of Object.entries(node)) {
      const found = walk(v, `${at}/${k.replace(/~/g, '~0').replace(/\//g, '~1')}`);
      if (found !== undefined) return found;
    }
    return undefined;
  };
  return walk({ components: doc.components, paths: doc.paths }, '');
}

/** The problems of `value` against `schema` (a node of the document, or a schema of its own): [] when valid. */
function validate(schema: Schema, value: unknown): string[] {
  const pointer = pointerOf(schema);
  const check = pointer === undefined ? ajv.compile(schema) : ajv.getSchema(`${DOC_ID}#${pointer}`)!;
  if (check(value)) return [];
  return (check.errors ?? []).map((e) => `${e.instancePath || '$'} ${e.message}${e.params && 'additionalProperty' in e.params ? `: ${e.params.additionalProperty}` : ''}`);
}

function deref(node: any): any {
  while (node && typeof node === 'object' && typeof node.$ref === 'string') {
    node = node.$ref.slice(2).split('/').reduce((at: any, part: string) => at?.[part], doc);
  }
  return node;
}

function operations(): Array<{ path: string; method: string; op: any }> {
  return Object.entries(doc.paths as Record<string, any>).flatMap(([p, item]) =>
    METHODS.filter((m) => item[m] !== undefined).map((m) => ({ path: p, method: m, op: item[m] })));
}

describe('the document', () => {
  test('is OpenAPI 3.1 with a path, an operationId and answers for every operation; every $ref resolves', () => {
    expect(doc.openapi).toBe('3.1.0');
    expect(operations().length).toBeGreaterThan(20);
    const ids = operations().map(({ op }) => op.operationId);
    expect(new Set(ids).size).toBe(ids.length);
    for (const { op } of operations()) expect(Object.keys(op.responses ?? {}).length).toBeGreaterThan(0);
    const unresolved: string[] = [];
    const walk = (node: any) => {
      if (Array.isArray(node)) return node.forEach(walk);
      if (node === null || typeof node !== 'object') return;
      if (typeof node.$ref === 'string' && deref(node) === undefined) unresolved.push(node.$ref);
      Object.values(node).forEach(walk);
    };
    walk(doc);
    expect(unresolved).toEqual([]);
  });

  test('is a valid OpenAPI 3.1 document (@seriousme/openapi-schema-validator, the specification\'s own schema)', async () => {
    // The validator is an ES module; jest runs CommonJS, so it runs in a node of its own.
    const script = `import { Validator } from '@seriousme/openapi-schema-validator';
      const r = await new Validator().validate(process.argv[1]); console.log(JSON.stringify(r));`;
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', script, path.join(ROOT, 'docs/openapi.yaml')], { cwd: ROOT });
    expect(JSON.parse(stdout)).toEqual({ valid: true });
  });

  test('names only error codes of shared/errors.ts, each under its status, and every code but internal somewhere', () => {
    const codes = new Map(errorCodes());
    const problems: string[] = [];
    const named = new Set<string>();
    for (const { path: p, method, op } of operations()) {
      for (const [status, response] of Object.entries(op.responses as Record<string, unknown>)) {
        const listed: string[] = deref(response)['x-error-codes'] ?? [];
        if (Number(status) >= 400 && listed.length === 0) problems.push(`${method} ${p} ${status}: no x-error-codes`);
        for (const code of listed) {
          named.add(code);
          if (!codes.has(code)) problems.push(`${method} ${p} ${status}: ${code} is not in shared/errors.ts`);
          else if (statusOf(code) !== Number(status) && OVERRIDDEN.get(code) !== Number(status)) {
            problems.push(`${method} ${p}: ${code} is ${statusOf(code)}, listed under ${status}`);
          }
        }
      }
    }
    // The answers no operation lists (x-unrouted: before routing, or to a path no operation takes),
    // each named in the description too.
    for (const u of doc['x-unrouted'] as Array<{ status: number; codes: string[]; on: string; prefix: string }>) {
      expect([u, ['every', 'unrouted'].includes(u.on), typeof u.prefix === 'string' && u.prefix.startsWith('/')]).toEqual([u, true, true]);
      for (const code of u.codes) {
        named.add(code);
        if (statusOf(code) !== u.status) problems.push(`x-unrouted: ${code} is ${statusOf(code)}, listed under ${u.status}`);
        if (!String(doc.info.description).includes(code)) problems.push(`info.description does not name ${code}`);
      }
    }
    const unnamed = [...codes.keys()].filter((c) => c !== 'internal' && !named.has(c));
    expect({ problems, unnamed }).toEqual({ problems: [], unnamed: [] });
  });

  test('every operation lists what any request may meet (400 bad_request, 413, 417), and 415 where it reads a body', () => {
    const missing: string[] = [];
    for (const { path: p, method, op } of operations()) {
      const codes = (status: string): string[] => deref(op.responses[status])?.['x-error-codes'] ?? [];
      if (!codes('400').includes('bad_request')) missing.push(`${method} ${p} 400 bad_request`);
      if (!codes('413').includes('payload_too_large')) missing.push(`${method} ${p} 413`);
      if (!codes('417').includes('expectation_failed')) missing.push(`${method} ${p} 417`);
      const readsBody = method === 'post' || method === 'put' || p.startsWith('/api/v1/kv');
      if (readsBody && !codes('415').includes('unsupported_media_type')) missing.push(`${method} ${p} 415`);
    }
    expect(missing).toEqual([]);
  });
});

let api: TestApi;
beforeAll(async () => {
  api = await startTestApi();
});
afterAll(async () => {
  await api.close();
});

test('names every route the app serves, and no route it does not', async () => {
  const server = api.server;
  const app = createApp({ config: api.config, pools: server.pools, log: createLogger('openapi-test', 'silent'), metrics: server.metrics, ops: server.ops });
  try {
    // Express's `:name` and `*name` are OpenAPI's `{name}`.
    const served = new Set(app.routes().map(({ method, path: p }) => `${method} ${p.replace(/[:*](\w+)/g, '{$1}')}`));
    const documented = new Set(operations().map(({ method, path: p }) => `${method.toUpperCase()} ${p}`));
    expect(served.size).toBeGreaterThan(20);
    expect({
      undocumented: [...served].filter((r) => !documented.has(r)).sort(),
      notServed: [...documented].filter((r) => !served.has(r)).sort(),
    }).toEqual({ undocumented: [], notServed: [] });
  } finally {
    await app.close();
  }
});

describe('live answers match the schemas', () => {
  /** The answer against the document: its status declared for the operation, its body valid, an error's code listed there. */
  function conforms(pathTemplate: string, method: string, res: JsonResponse): void {
    const response = deref(doc.paths[pathTemplate]?.[method]?.responses?.[String(res.status)]);
    expect([pathTemplate, method, res.status, response !== undefined]).toEqual([pathTemplate, method, res.status, true]);
    const schema: Schema | undefined = response.content?.['application/json']?.schema;
    if (schema === undefined) {
      expect(res.text).toBe('');
      return;
    }
    expect(validate(schema, res.body)).toEqual([]);
    if (res.status >= 400) expect(response['x-error-codes']).toContain(res.body.error);
  }

  test('KV: put, get (found, not found, 304), a batch, a lost required, delete, and refusals', async () => {
    const url = api.url;
    conforms('/api/v1/kv/{ns}/{key}', 'put', await call(url, 'PUT', '/api/v1/kv/oa/k1', { value: { a: 1 }, ttlSeconds: 60 }));
    const got = await call(url, 'GET', '/api/v1/kv/oa/k1');
    conforms('/api/v1/kv/{ns}/{key}', 'get', got);
    expect(got.body.found).toBe(true);
    conforms('/api/v1/kv/{ns}/{key}', 'get', await call(url, 'GET', '/api/v1/kv/oa/none'));
    conforms('/api/v1/kv/{ns}/{key}', 'get', await call(url, 'GET', '/api/v1/kv/oa/k1', undefined, { 'if-none-match': got.headers.get('etag')! }));
    conforms('/api/v1/kv/{ns}/{key}', 'put', await call(url, 'PUT', '/api/v1/kv/oa/k1', { value: 2, ttlSeconds: 60, expect: 0 }));
    conforms('/api/v1/kv', 'post', await call(url, 'POST', '/api/v1/kv', { operations: [
      { op: 'getMany', ns: 'oa', keys: ['k1', 'k2'] }, { op: 'getPrefix', ns: 'ob', prefix: 'k' },
      { op: 'incr', ns: 'oc', key: 'n', delta: 2, forever: true }, { op: 'put', ns: 'od', key: 'x', value: 1, forever: true },
    ] }));
    const lost = await call(url, 'POST', '/api/v1/kv', { operations: [{ op: 'putIfAbsent', ns: 'oa', key: 'k1', value: 3, forever: true, required: true }] });
    expect(lost.body.reason).toBe('kv_precondition');
    conforms('/api/v1/kv', 'post', lost);
    conforms('/api/v1/kv/{ns}/{key}', 'delete', await call(url, 'DELETE', '/api/v1/kv/oa/k1'));
    const refused = await call(url, 'PUT', '/api/v1/kv/oa/k1', { value: 1 });
    expect([refused.status, refused.body.error]).toEqual([400, 'kv_expiry_not_specified']);
    conforms('/api/v1/kv/{ns}/{key}', 'put', refused);
    conforms('/api/v1/kv', 'post', await call(url, 'POST', '/api/v1/kv', { operations: [{ op: 'nope', ns: 'oa' }] }));
  });

  test('the log: configure, push, pop (200 and 204), ack, ack batch, lease extend, dead letters, queue delete, and refusals', async () => {
    const url = api.url;
    conforms('/api/v1/configure', 'post', await call(url, 'POST', '/api/v1/configure', { queue: 'oa-q', options: { leaseTime: 30, retryLimit: 0 } }));
    conforms('/api/v1/push', 'post', await call(url, 'POST', '/api/v1/push', { items: [
      { queue: 'oa-q', payload: { n: 1 }, transactionId: 't1' }, { queue: 'oa-q', payload: { n: 2 }, transactionId: 't2' },
      { queue: 'oa-q', payload: { n: 3 }, transactionId: 't1' },
    ] }));
    const popped = await call(url, 'GET', '/api/v1/pop/queue/oa-q?batch=1');
    conforms('/api/v1/pop/queue/{queue}', 'get', popped);
    const m = popped.body.messages[0];
    conforms('/api/v1/lease/{leaseId}/extend', 'post', await call(url, 'POST', `/api/v1/lease/${m.leaseId}/extend`, { seconds: 60 }));
    conforms('/api/v1/ack', 'post', await call(url, 'POST', '/api/v1/ack', { transactionId: m.transactionId, partitionId: m.partitionId, status: 'completed', leaseId: m.leaseId }));
    const next = await call(url, 'GET', '/api/v1/pop/queue/oa-q/partition/Default?batch=5');
    conforms('/api/v1/pop/queue/{queue}/partition/{partition}', 'get', next);
    const n = next.body.messages[0];
    conforms('/api/v1/ack/batch', 'post', await call(url, 'POST', '/api/v1/ack/batch', { acknowledgments: [
      { transactionId: n.transactionId, partitionId: n.partitionId, status: 'failed', error: 'boom' },
      { transactionId: 'nobody', partitionId: n.partitionId, status: 'completed' },
    ] }));
    conforms('/api/v1/pop/queue/{queue}', 'get', await call(url, 'GET', '/api/v1/pop/queue/oa-q?batch=5'));
    const dead = await call(url, 'GET', '/api/v1/dlq?queue=oa-q');
    expect(dead.body.messages).toHaveLength(1);
    conforms('/api/v1/dlq', 'get', dead);
    // Documented 404 (not served): no answer of the GET's, no read.
    const head = await call(url, 'HEAD', '/api/v1/dlq?queue=oa-q');
    expect([head.status, head.text]).toEqual([404, '']);
    conforms('/api/v1/lease/{leaseId}/extend', 'post', await call(url, 'POST', '/api/v1/lease/00000000-0000-4000-8000-000000000000/extend'));
    conforms('/api/v1/resources/queues/{queue}', 'delete', await call(url, 'DELETE', '/api/v1/resources/queues/oa-q'));
    conforms('/api/v1/pop/queue/{queue}', 'get', await call(url, 'GET', '/api/v1/pop/queue/oa-q?batch=0'));
    conforms('/api/v1/push', 'post', await call(url, 'POST', '/api/v1/push', { items: [{ queue: 'oa-q', payload: 1, transactionId: 'timer:x' }] }));
    conforms('/api/v1/configure', 'post', await call(url, 'POST', '/api/v1/configure', { queue: 'oa-q', options: { priority: 5 } }));
  });

  test('the transaction wire (committed, a lost required) and the timers', async () => {
    const url = api.url;
    conforms('/api/v1/transaction', 'post', await call(url, 'POST', '/api/v1/transaction', {
      operations: [{ type: 'push', items: [{ queue: 'oa-tx', payload: 1 }] }],
      kv: [{ op: 'putIfAbsent', ns: 'oa-tx', key: 'once', value: true, forever: true, required: true }],
      timers: [{ op: 'schedule', queue: 'oa-tx', payload: 2, delaySeconds: 3600 }],
    }));
    conforms('/api/v1/transaction', 'post', await call(url, 'POST', '/api/v1/transaction', {
      kv: [{ op: 'putIfAbsent', ns: 'oa-tx', key: 'once', value: true, forever: true, required: true }],
    }));
    conforms('/api/v1/transaction', 'post', await call(url, 'POST', '/api/v1/transaction', {}));
    const scheduled = await call(url, 'POST', '/api/v1/timers', { queue: 'oa-t', payload: { x: 1 }, delaySeconds: 3600, timerKey: 'k' });
    conforms('/api/v1/timers', 'post', scheduled);
    const id = scheduled.body.timerId;
    conforms('/api/v1/timers', 'get', await call(url, 'GET', '/api/v1/timers?limit=1'));
    conforms('/api/v1/timers/{id}', 'get', await call(url, 'GET', `/api/v1/timers/${id}`));
    conforms('/api/v1/timers/{id}/reschedule', 'post', await call(url, 'POST', `/api/v1/timers/${id}/reschedule`, { delaySeconds: 60 }));
    conforms('/api/v1/timers/{id}', 'delete', await call(url, 'DELETE', `/api/v1/timers/${id}`));
    conforms('/api/v1/timers/{id}', 'get', await call(url, 'GET', `/api/v1/timers/${id}`));
    conforms('/api/v1/timers/{id}', 'get', await call(url, 'GET', '/api/v1/timers/not-a-uuid'));
    conforms('/api/v1/timers', 'post', await call(url, 'POST', '/api/v1/timers', { queue: 'oa-t', payload: 1 }));
  });

  test('the probes, the operator routes, and an unknown route', async () => {
    const url = api.url;
    conforms('/health', 'get', await call(url, 'GET', '/health'));
    conforms('/ready', 'get', await call(url, 'GET', '/ready'));
    conforms('/api/v1/system/kv-timers', 'get', await call(url, 'GET', '/api/v1/system/kv-timers'));
    conforms('/api/v1/system/kv-timers', 'post', await call(url, 'POST', '/api/v1/system/kv-timers', { kv: true }));
    conforms('/api/v1/system/kv-timers', 'post', await call(url, 'POST', '/api/v1/system/kv-timers', { colour: true }));
    conforms('/api/v1/system/cluster', 'get', await call(url, 'GET', '/api/v1/system/cluster'));
    // The document itself is served, as the build wrote it from docs/openapi.yaml.
    const served = await call(url, 'GET', '/api/v1/openapi.json');
    conforms('/api/v1/openapi.json', 'get', served);
    expect(served.body).toEqual(doc);
    const missing = await call(url, 'GET', '/api/v1/nothing-here');
    expect(missing.status).toBe(404);
    expect(validate(doc.components.responses.NotFound.content['application/json'].schema, missing.body)).toEqual([]);
    expect(doc.components.responses.NotFound['x-error-codes']).toContain(missing.body.error);
  });
});

test('the validator refuses what the schemas exclude (so a pass above means something)', () => {
  const popped = doc.components.schemas.Popped;
  expect(validate(popped, {})).toContain("$ must have required property 'success'");
  const message = { ...validPopped().messages[0], retryCount: -1 };
  expect(validate(popped, { ...validPopped(), messages: [message] })).toEqual(['/messages/0/retryCount must be >= 0']);
  expect(validate(popped, { ...validPopped(), partitionsClaimed: 0 })).toEqual(['/partitionsClaimed must be >= 1']);
  expect(validate(popped, validPopped())).toEqual([]);
  expect(validate(doc.components.schemas.Name, '-x')).toHaveLength(1);
  expect(validate(doc.components.schemas.PushEntry, { ...pushEntry(), status: 'kept' }).length).toBeGreaterThan(0);
  // A KV answer must carry what it names and nothing else: the KV reads' rows, truncated, nextAfter.
  const page = { index: 0, op: 'getPrefix', rows: [], truncated: false, nextAfter: null };
  expect(validate(doc.components.schemas.KvResult, page)).toEqual([]);
  expect(validate(doc.components.schemas.KvPrefixPage, { index: 0, op: 'getPrefix', items: [], next: null }).length).toBeGreaterThan(0);
  expect(validate(doc.components.schemas.KvPrefixPage, { ...page, extra: 1 })).toContain('$ must NOT have additional properties: extra');
  expect(validate(doc.components.schemas.KvGetManyResult, { index: 0, op: 'getMany', rows: [] })).toContain("$ must have required property 'missing'");
});

function pushEntry() {
  const id = '0a3fe421-b988-4914-a1f2-054cd036e533';
  return { index: 0, transaction_id: 't', status: 'queued', message_id: id, partition_id: id, trace_id: null, queueName: 'q', partition: 'Default' };
}

function validPopped() {
  const id = '0a3fe421-b988-4914-a1f2-054cd036e533';
  const at = '2026-12-01T19:01:17.042Z';
  return {
    success: true, queue: 'q', partition: 'Default', partitionId: id, leaseId: id, consumerGroup: 'g', partitionsClaimed: 1,
    messages: [{ id, transactionId: 't', traceId: null, data: 1, producerSub: null, partitionId: id, partition: 'Default', queue: 'q',
      leaseId: id, leaseExpiresAt: at, consumerGroup: 'g', createdAt: at, retryCount: 0 }],
  };
}

test('openapi-typescript turns the document into types a program compiles against: getPrefix has rows, configure has options', async () => {
  const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'queen-openapi-ts-'));
  try {
    const bin = path.join(ROOT, 'node_modules', '.bin', 'openapi-typescript');
    await promisify(execFile)(bin, [path.join(ROOT, 'docs/openapi.yaml'), '-o', path.join(dir, 'openapi.ts')], { cwd: ROOT });
    const program = path.join(dir, 'reads.ts');
    fs.writeFileSync(
      program,
      [
        "import type { paths, components } from './openapi';",
        "type Batch = paths['/api/v1/kv']['post']['responses'][200]['content']['application/json'];",
        "type Result = Extract<Batch, { ok: true }>['results'][number];",
        'export function keysOf(r: Result): string[] {',
        "  if (r.op === 'getPrefix') return r.rows.map((row) => row.key).concat(r.truncated && r.nextAfter !== null ? [r.nextAfter] : []);",
        "  if (r.op === 'getMany') return r.rows.map((row) => row.key).concat(r.missing);",
        '  return [r.key];',
        '}',
        "export const lease = (c: components['schemas']['Configured']): number => c.options.leaseTime;",
        "export const sample: components['schemas']['Configured']['options'] = { leaseTime: 30, retryLimit: 3, delayedProcessing: 0, windowBuffer: 0,",
        '  priority: 0, maxSize: 0, ttl: 0, retryDelay: 0, retryDelayMax: 0, retentionSeconds: 0, completedRetentionSeconds: 0, maxWaitTimeSeconds: 0,',
        '  retentionEnabled: false, encryptionEnabled: false, deadLetterQueue: true, dlqAfterMaxRetries: true };',
      ].join('\n'),
    );
    const compiled = ts.createProgram([program], { strict: true, noEmit: true, target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.CommonJS, lib: ['lib.es2022.d.ts'], types: [] });
    const problems = ts.getPreEmitDiagnostics(compiled).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
    expect(problems).toEqual([]);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
