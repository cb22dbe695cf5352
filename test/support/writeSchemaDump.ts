// `npm run schema:dump`: rewrites test/schema.sql from a fresh database with the schema applied.
import fs from 'node:fs';
import path from 'node:path';
import { buildTemplate, startTestServer, withDatabase, TEMPLATE_DB, dropTemplate } from './database';
import { dumpSchema } from './schemaDump';

async function main(): Promise<void> {
  const server = await startTestServer();
  try {
    await buildTemplate(server.adminUrl);
    const text = await dumpSchema(withDatabase(server.adminUrl, TEMPLATE_DB));
    fs.writeFileSync(path.resolve(__dirname, '..', '..', '..', 'test', 'schema.sql'), text);
    await dropTemplate(server.adminUrl);
  } finally {
    await server.stop();
  }
}

main().catch((err) => {
  process.stderr.write(`${err?.stack ?? err}\n`);
  process.exit(1);
});
