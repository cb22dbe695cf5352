import { buildTemplate, startTestServer } from './database';

export default async function globalSetup(): Promise<void> {
  const server = await startTestServer();
  (globalThis as Record<string, unknown>).__queenTestServer = server;
  await buildTemplate(server.adminUrl);
  // Workers are forked after this and inherit the environment.
  process.env.QUEEN_TEST_ADMIN_URL = server.adminUrl;
  process.stderr.write(`\n[queen tests] PostgreSQL from ${server.kind}\n`);
}
