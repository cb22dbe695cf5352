// The "naive" lane of bench/kv.ts: the handler a user would write instead of running the cell. One
// process, Express 5 with express.json(), a default pg Pool (max 10), `pool.query(text, values)`
// (pg's unnamed statements), JSON parsed in and re-serialised out. The same SQL statements as the
// sql lane, against the same queen.kv table. Not a product surface: it exists to be measured against.
import express from 'express';
import { Pool } from 'pg';

const TENANT = '00000000-0000-0000-0000-000000000001';

const GET = `SELECT value, version FROM queen.kv
              WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND (expires_at IS NULL OR expires_at > now())`;
const GET_MANY = `SELECT key, value, version FROM queen.kv
              WHERE tenant_id = $1 AND namespace = $2 AND key = ANY($3::text[]) AND (expires_at IS NULL OR expires_at > now())`;
const PUT = `INSERT INTO queen.kv (tenant_id, namespace, key, value, version)
             VALUES ($1, $2, $3, $4, nextval('queen.kv_version_seq'))
             ON CONFLICT (tenant_id, namespace, key) DO UPDATE
               SET value = EXCLUDED.value, version = EXCLUDED.version, expires_at = NULL, updated_at = now()
             RETURNING version`;
const PUT_IF_ABSENT = `INSERT INTO queen.kv (tenant_id, namespace, key, value, version)
             VALUES ($1, $2, $3, $4, nextval('queen.kv_version_seq'))
             ON CONFLICT (tenant_id, namespace, key) DO NOTHING
             RETURNING version`;
const INCR = `INSERT INTO queen.kv AS k (tenant_id, namespace, key, value, version)
             VALUES ($1, $2, $3, to_jsonb($4::numeric), nextval('queen.kv_version_seq'))
             ON CONFLICT (tenant_id, namespace, key) DO UPDATE
               SET value = to_jsonb(k.value::numeric + $4::numeric), version = EXCLUDED.version, updated_at = now()
             RETURNING value, version`;
const PUT_BATCH = `INSERT INTO queen.kv (tenant_id, namespace, key, value, version)
             SELECT $1, $2, i.key, i.value, nextval('queen.kv_version_seq') FROM jsonb_to_recordset($3::jsonb) AS i(key text, value jsonb)
             ON CONFLICT (tenant_id, namespace, key) DO UPDATE
               SET value = EXCLUDED.value, version = EXCLUDED.version, expires_at = NULL, updated_at = now()`;

const pool = new Pool({ connectionString: process.env.DATABASE_URL });
pool.on('error', () => undefined);
const app = express();
app.use(express.json({ limit: '10mb' }));

app.get('/kv/:ns/:key', async (req, res) => {
  const { rows } = await pool.query(GET, [TENANT, req.params.ns, req.params.key]);
  res.json(rows[0] ? { found: true, value: rows[0].value, version: rows[0].version } : { found: false });
});
app.post('/get', async (req, res) => {
  const { rows } = await pool.query(GET, [TENANT, req.body.ns, req.body.key]);
  res.json(rows[0] ? { found: true, value: rows[0].value, version: rows[0].version } : { found: false });
});
app.post('/getMany', async (req, res) => {
  const { rows } = await pool.query(GET_MANY, [TENANT, req.body.ns, req.body.keys]);
  res.json({ rows });
});
app.put('/kv/:ns/:key', async (req, res) => {
  const { rows } = await pool.query(PUT, [TENANT, req.params.ns, req.params.key, JSON.stringify(req.body.value)]);
  res.json({ applied: true, version: rows[0].version });
});
app.post('/putIfAbsent', async (req, res) => {
  const { rows } = await pool.query(PUT_IF_ABSENT, [TENANT, req.body.ns, req.body.key, JSON.stringify(req.body.value)]);
  res.json({ applied: rows.length === 1, version: rows[0]?.version ?? null });
});
app.post('/incr', async (req, res) => {
  const { rows } = await pool.query(INCR, [TENANT, req.body.ns, req.body.key, req.body.delta ?? 1]);
  res.json({ applied: true, value: rows[0].value, version: rows[0].version });
});
app.post('/putBatch', async (req, res) => {
  const { rowCount } = await pool.query(PUT_BATCH, [TENANT, req.body.ns, JSON.stringify(req.body.items)]);
  res.json({ applied: rowCount });
});
app.use((err: Error, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
  res.status(500).json({ error: err.message });
});

const server = app.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const addr = server.address();
  process.send?.({ port: typeof addr === 'object' && addr ? addr.port : 0 });
});
server.keepAliveTimeout = 65_000;
process.on('SIGTERM', () => {
  server.close();
  server.closeAllConnections();
  void pool.end().then(() => process.exit(0));
});
