// The schema apply at boot: idempotent, safe when many processes boot at once, and never in the way
// of a running cell's traffic. Since versioned migrations (test/boot/migrations.test.ts), a boot of
// an up-to-date database runs nothing; the tests that need the files to run against a live schema
// start from a database of a release before versioning (no queen.schema_migrations), whose boot
// runs the whole baseline over it, as the first boot of this release does in production.
import { Client } from 'pg';
import { applySchema } from '../../shared/db';
import { dumpSchema } from '../support/schemaDump';
import { createTestDatabase } from '../support/database';

let db: { url: string; drop(): Promise<void> };
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(() => db.drop());

test('applying the schema again changes nothing', async () => {
  const before = await dumpSchema(db.url);
  await applySchema(db.url);
  await applySchema(db.url);
  expect(await dumpSchema(db.url)).toBe(before);
});

test('eight concurrent boots against an empty database all succeed and agree', async () => {
  const empty = await createTestDatabase({ empty: true });
  try {
    await Promise.all(Array.from({ length: 8 }, () => applySchema(empty.url)));
    expect(await dumpSchema(empty.url)).toBe(await dumpSchema(db.url));
  } finally {
    await empty.drop();
  }
});

test('a boot beside in-flight writes on every queen table completes without waiting for them', async () => {
  const writer = new Client({ connectionString: db.url });
  await writer.connect();
  try {
    // A database from before versioning: the boot runs every baseline file over the live schema.
    await writer.query('DROP TABLE queen.schema_migrations');
    const { rows } = await writer.query(
      `SELECT format('%I.%I', schemaname, tablename) AS t FROM pg_tables WHERE schemaname = 'queen' ORDER BY 1`,
    );
    expect(rows.length).toBeGreaterThan(3);
    await writer.query('BEGIN');
    // ROW EXCLUSIVE is what every INSERT/UPDATE/DELETE holds until its commit. Anything the boot
    // takes that conflicts with it (SHARE for CREATE INDEX, ACCESS EXCLUSIVE for ALTER) would wait.
    for (const { t } of rows) await writer.query(`LOCK TABLE ${t} IN ROW EXCLUSIVE MODE`);
    const boot = new Client({ connectionString: db.url });
    await boot.connect();
    try {
      // A boot that needs a conflicting lock fails fast here instead of hanging.
      await boot.query(`ALTER DATABASE ${new URL(db.url).pathname.slice(1)} SET lock_timeout = '2s'`);
    } finally {
      await boot.end();
    }
    await expect(applySchema(db.url)).resolves.toMatchObject({ adopted: true });
  } finally {
    await writer.query('ROLLBACK').catch(() => undefined);
    await writer.end();
  }
});

describe('a queues table from before tenancy', () => {
  const DEFAULT_TENANT = '00000000-0000-0000-0000-000000000001';

  /**
   * A database whose queen.queues is as it was before tenancy (name alone unique), with one message
   * in it; tenancy came before versioned migrations, so it has no queen.schema_migrations either.
   */
  async function preTenancy(): Promise<{ url: string; drop(): Promise<void> }> {
    const old = await createTestDatabase();
    const c = new Client({ connectionString: old.url });
    await c.connect();
    try {
      await c.query('DROP TABLE queen.schema_migrations');
      await c.query(`ALTER TABLE queen.queues DROP CONSTRAINT queues_tenant_id_name_key, DROP COLUMN tenant_id,
                       ADD CONSTRAINT queues_name_key UNIQUE (name)`);
      await c.query(`WITH q AS (INSERT INTO queen.queues (name, lease_time) VALUES ('legacy', 60) RETURNING id),
                          p AS (INSERT INTO queen.partitions (queue_id, name, last_seq) SELECT id, 'Default', 1 FROM q RETURNING id)
                     INSERT INTO queen.messages (partition_id, seq, transaction_id, payload) SELECT id, 1, 'old-1', '"before"' FROM p`);
    } finally {
      await c.end();
    }
    return old;
  }

  const hasTenantColumn = async (c: Client) =>
    (await c.query(`SELECT count(*)::int AS n FROM pg_attribute WHERE attrelid = 'queen.queues'::regclass AND attname = 'tenant_id' AND NOT attisdropped`)).rows[0].n === 1;

  test('gains tenant_id once: its rows are the default tenant\'s, readable as before, and the schema ends as a fresh one\'s', async () => {
    const old = await preTenancy();
    const c = new Client({ connectionString: old.url });
    await c.connect();
    try {
      expect(await hasTenantColumn(c)).toBe(false);
      await applySchema(old.url);
      expect(await dumpSchema(old.url)).toBe(await dumpSchema(db.url));
      const { rows } = await c.query(`SELECT tenant_id::text AS t, lease_time FROM queen.queues WHERE name = 'legacy'`);
      expect(rows).toEqual([{ t: DEFAULT_TENANT, lease_time: 60 }]);
      const popped = await c.query(`SELECT queen.log_pop_v1($1::uuid, 'legacy', NULL, '__QUEUE_MODE__', 10) AS m`, [DEFAULT_TENANT]);
      expect(popped.rows[0].m.map((m: { transactionId: string; data: unknown }) => [m.transactionId, m.data])).toEqual([['old-1', 'before']]);
      // A push of the old transactionId to the default tenant is the duplicate it is.
      const again = await c.query(`SELECT queen.log_push_v1($1::uuid, 'legacy', NULL, '2', 'old-1') ->> 'status' AS s`, [DEFAULT_TENANT]);
      expect(again.rows[0].s).toBe('duplicate');
      // Another tenant may now have a queue of that name.
      const other = await c.query(`SELECT queen.log_push_v1('aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa', 'legacy', NULL, '1', 'old-1') ->> 'status' AS s`);
      expect(other.rows[0].s).toBe('queued');
      await applySchema(old.url);
      expect(await dumpSchema(old.url)).toBe(await dumpSchema(db.url));
    } finally {
      await c.end();
      await old.drop();
    }
  });

  test('beside in-flight traffic: each attempt waits at most its lock_timeout, traffic passes between attempts, and the boot completes once the lock is free', async () => {
    const old = await preTenancy();
    const [writer, reader] = [new Client({ connectionString: old.url }), new Client({ connectionString: old.url })];
    await Promise.all([writer.connect(), reader.connect()]);
    try {
      await writer.query('BEGIN');
      await writer.query('LOCK TABLE queen.queues IN ROW EXCLUSIVE MODE');
      const boot = applySchema(old.url);
      const failed = boot.then(() => undefined, (err: Error) => err);
      // Wait until the boot is seen asking for its lock, then read the table as a pop does, several
      // times, each under a bound: a request that stalled traffic for good would fail them.
      await reader.query(`SET lock_timeout = '2s'`);
      for (let seen = 0; seen < 1; ) {
        seen = (await reader.query(`SELECT count(*)::int AS n FROM pg_locks WHERE relation = 'queen.queues'::regclass AND mode = 'AccessExclusiveLock' AND NOT granted`)).rows[0].n;
      }
      for (let i = 0; i < 5; i++) {
        expect((await reader.query(`SELECT count(*)::int AS n FROM queen.queues`)).rows[0].n).toBe(1);
      }
      await writer.query('COMMIT');
      expect(await failed).toBeUndefined();
      expect(await hasTenantColumn(reader)).toBe(true);
    } finally {
      await writer.query('ROLLBACK').catch(() => undefined);
      await Promise.all([writer.end(), reader.end()]);
      await old.drop();
    }
  });

  test('held by a transaction past the bound, the boot fails saying so, and nothing changed', async () => {
    const old = await preTenancy();
    const writer = new Client({ connectionString: old.url });
    await writer.connect();
    try {
      await writer.query('BEGIN');
      await writer.query('LOCK TABLE queen.queues IN ROW EXCLUSIVE MODE');
      await expect(applySchema(old.url)).rejects.toThrow(/010_log.sql.*tenant_id once.*50 attempts/);
      await writer.query('COMMIT');
      expect(await hasTenantColumn(writer)).toBe(false);
    } finally {
      await writer.query('ROLLBACK').catch(() => undefined);
      await writer.end();
      await old.drop();
    }
  });
});
