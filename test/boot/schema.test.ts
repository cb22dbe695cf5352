// The schema apply at boot: idempotent, safe when many processes boot at once, and never in the way
// of a running cell's traffic.
import { Client } from 'pg';
import { applySchema } from '../../shared/db';
import { createTestDatabase } from '../support/database';
import { dumpSchema } from '../support/schemaDump';

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
    await expect(applySchema(db.url)).resolves.toBeUndefined();
  } finally {
    await writer.query('ROLLBACK').catch(() => undefined);
    await writer.end();
  }
});
