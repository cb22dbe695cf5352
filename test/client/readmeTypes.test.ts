// The examples of client/README.md type-check, strict, against the package's published types (the
// .d.ts files in client/dist, reached through the package's exports as a user's code reaches them).
import fs from 'node:fs';
import path from 'node:path';
import { strictProgram } from './typecheck';

const ROOT = path.resolve(__dirname, '..', '..', '..');

test('the README examples compile under strict TypeScript against @queen-kv/client', () => {
  const text = fs.readFileSync(path.join(ROOT, 'client', 'README.md'), 'utf8');
  const blocks = [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
  const lines = blocks.map((b) => b.split('\n'));
  const imports = [...new Set(lines.flatMap((l) => l.filter((x) => x.startsWith('import '))))];
  const body = lines.map((l, i) => {
    const code = l.filter((x) => !x.startsWith('import ')).join('\n');
    return i === 0 ? code : `{\n${code}\n}`;
  });
  const source = [
    ...imports,
    'declare function sendEmail(data: unknown): Promise<void>',
    'declare function chargeCard(order: unknown): Promise<void>',
    'declare function log(...args: unknown[]): void',
    'export async function examples(): Promise<void> {',
    ...body,
    '}',
  ].join('\n');
  // Inside the repository (so node_modules resolves the package), in the build output (ignored by git).
  const dir = path.join(ROOT, 'dist', 'readme-check');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'examples.ts');
  fs.writeFileSync(file, source);
  const { problems } = strictProgram([file], { noEmit: true, esModuleInterop: true });
  expect(problems).toEqual([]);
});
