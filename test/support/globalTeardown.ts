import { dropTemplate, TestServer } from './database';

export default async function globalTeardown(): Promise<void> {
  const server = (globalThis as Record<string, unknown>).__queenTestServer as TestServer | undefined;
  if (!server) return;
  if (server.kind === 'env') await dropTemplate(server.adminUrl).catch(() => undefined);
  await server.stop();
}
