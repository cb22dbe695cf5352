// The release command (`npm run migrate`, the Procfile's `release:` line, the Kubernetes Job): the
// schema applied to a fresh database and exit 0; a database it cannot use is exit 1 with a line
// naming it (never its password).
import { dumpSchema } from '../support/schemaDump';
import { withDatabase, withTestDatabase } from '../support/database';
import { runMigrate } from '../support/processes';

test('on a fresh empty database it applies the whole schema and exits 0; a second run changes nothing', () =>
  withTestDatabase({ empty: true }, (empty) => withTestDatabase({}, async (reference) => {
    const first = await runMigrate({ DATABASE_URL: empty.url });
    expect(first.code).toBe(0);
    const database = `${new URL(empty.url).hostname}:${new URL(empty.url).port}${new URL(empty.url).pathname}`;
    expect(first.lines.some((l) => l.process === 'migrate' && l.msg === 'schema applied')).toBe(true);
    expect(first.lines[first.lines.length - 1].msg).toBe(`migrate: the schema is applied to ${database}`);
    const applied = await dumpSchema(empty.url);
    expect(applied).toBe(await dumpSchema(reference.url));
    expect((await runMigrate({ DATABASE_URL: empty.url })).code).toBe(0);
    expect(await dumpSchema(empty.url)).toBe(applied);
  })));

test('a database it cannot use is exit 1 with a line naming the database and not the password', () =>
  withTestDatabase({ empty: true }, async (db) => {
    const u = new URL(withDatabase(db.url, 'queen_no_such_database'));
    u.password = 's3cret-do-not-log';
    const run = await runMigrate({ DATABASE_URL: u.toString(), QUEEN_DB_BOOT_WAIT_MS: '0' });
    expect(run.code).toBe(1);
    const last = run.lines[run.lines.length - 1];
    expect(last.level).toBe(60);
    expect(last.database).toBe(`${u.hostname}:${u.port}/queen_no_such_database`);
    expect(last.msg).toContain(`could not be applied to ${u.hostname}:${u.port}/queen_no_such_database`);
    expect(run.output).not.toContain('s3cret-do-not-log');
  }));

test('without DATABASE_URL it refuses (exit 1) instead of starting an embedded PostgreSQL', async () => {
  const run = await runMigrate({});
  expect(run.code).toBe(1);
  expect(run.lines[run.lines.length - 1].msg).toMatch(/DATABASE_URL is not set/);
});

test('sslmode=require against a server without TLS is refused at once, not waited for, and the line says so', () =>
  withTestDatabase({ empty: true }, async (db) => {
    // The suite's server has no TLS: pg 8 never falls back to plain text when the URL asks for TLS.
    const run = await runMigrate({ DATABASE_URL: `${db.url}?sslmode=require`, QUEEN_DB_BOOT_WAIT_MS: '60000' });
    expect(run.code).toBe(1);
    expect(run.lines.filter((l) => l.msg === 'database not reachable yet; waiting for it before booting')).toEqual([]);
    expect(run.lines[run.lines.length - 1].msg).toMatch(/does not support SSL connections/);
  }));
