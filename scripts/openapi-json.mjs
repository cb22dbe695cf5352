// Build step: docs/openapi.yaml (the API's description, kept by hand and held to the app by
// test/docs/openapi.test.ts) written as dist/openapi.json, which GET /api/v1/openapi.json serves.
// YAML is parsed here, at build time, so the running processes need no YAML parser.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const doc = YAML.parse(fs.readFileSync(path.join(root, 'docs', 'openapi.yaml'), 'utf8'));
fs.mkdirSync(path.join(root, 'dist'), { recursive: true });
fs.writeFileSync(path.join(root, 'dist', 'openapi.json'), JSON.stringify(doc));
