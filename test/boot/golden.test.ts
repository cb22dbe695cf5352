// The schema, as the catalog sees it, against the golden copy in test/schema.sql. A failing diff
// is not a bug by itself: it says the schema changed. Review it, then `npm run schema:dump`.
import fs from 'node:fs';
import path from 'node:path';
import { dumpSchema } from '../support/schemaDump';
import { createTestDatabase } from '../support/database';

test('the applied schema matches test/schema.sql', async () => {
  const db = await createTestDatabase();
  try {
    const golden = fs.readFileSync(path.resolve(__dirname, '..', '..', '..', 'test', 'schema.sql'), 'utf8');
    expect(await dumpSchema(db.url)).toBe(golden);
  } finally {
    await db.drop();
  }
});
