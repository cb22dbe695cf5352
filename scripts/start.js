#!/usr/bin/env node
// `npm start`: compile what runs, then become the API's primary process (this process, not a child:
// it is the one npm signals). package.json runs it as `exec node scripts/start.js`: npm runs every
// script through `sh -c`, and Debian's sh (dash) forks a lone command rather than replacing itself
// with it, so without `exec` a shell sat between npm and node, and a SIGTERM to npm ended the
// shell and left the API, its workers, the sweeper and PostgreSQL running.
//
// What is compiled: the processes (tsconfig.build.json: services/ and shared/), file by file with
// TypeScript's own per-file emit and no type check, and only the files whose output is older than
// their source: about 2 s for all of them after `npm ci`, nothing on an unchanged tree. The suites,
// the benchmarks and the client are not: `npm test` and `npm run build` compile everything with the
// type check (`npm run typecheck` alone), and tsconfig.json's isolatedModules makes tsc refuse any
// code whose per-file emit could differ from its own. dist/openapi.json is written again when
// docs/openapi.yaml is newer.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { pathToFileURL } = require('node:url');

const root = path.resolve(__dirname, '..');
const dist = path.join(root, 'dist');
const sourceDirs = ['services', 'shared'];

function tsFiles(dir, out = []) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) tsFiles(full, out);
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(full);
  }
  return out;
}

const mtime = (file) => {
  try {
    return fs.statSync(file).mtimeMs;
  } catch {
    return -1;
  }
};

const outputOf = (source) => path.join(dist, path.relative(root, source)).replace(/\.ts$/, '.js');

function compileStale() {
  const configFile = path.join(root, 'tsconfig.build.json');
  const configTime = Math.max(mtime(configFile), mtime(path.join(root, 'tsconfig.json')));
  const stale = sourceDirs
    .flatMap((d) => tsFiles(path.join(root, d)))
    .filter((source) => {
      const built = mtime(outputOf(source));
      return built < mtime(source) || built < configTime;
    });
  if (stale.length === 0) return 0;
  const ts = require('typescript');
  const parsed = ts.getParsedCommandLineOfConfigFile(configFile, {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: (d) => {
    throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  } });
  const options = { ...parsed.options, sourceMap: true, declaration: false, incremental: false };
  delete options.rootDir;
  delete options.outDir;
  delete options.tsBuildInfoFile;
  for (const source of stale) {
    const out = outputOf(source);
    const relative = path.relative(root, source);
    const result = ts.transpileModule(fs.readFileSync(source, 'utf8'), { fileName: source, compilerOptions: options, reportDiagnostics: true });
    const errors = (result.diagnostics ?? []).filter((d) => d.category === ts.DiagnosticCategory.Error);
    if (errors.length) {
      throw new Error(`${relative}: ${errors.map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n')).join('; ')}`);
    }
    // The map names its source relative to the output, as tsc's do.
    const map = JSON.parse(result.sourceMapText);
    map.file = path.basename(out);
    map.sources = [path.relative(path.dirname(out), source)];
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(`${out}.map`, JSON.stringify(map));
    fs.writeFileSync(out, result.outputText);
  }
  return stale.length;
}

async function writeOpenApi() {
  const json = path.join(dist, 'openapi.json');
  if (mtime(json) >= mtime(path.join(root, 'docs', 'openapi.yaml'))) return false;
  await import(pathToFileURL(path.join(root, 'scripts', 'openapi-json.mjs')).href);
  return true;
}

async function start() {
  const begun = Date.now();
  const compiled = compileStale();
  const openapi = await writeOpenApi();
  if (compiled || openapi) {
    process.stderr.write(`npm start: compiled ${compiled} file(s)${openapi ? ' and dist/openapi.json' : ''} in ${Date.now() - begun} ms (no type check: npm run typecheck)\n`);
  }
  // The primary runs here; its workers run main.js itself (main.ts sets cluster's exec).
  require(path.join(dist, 'services', 'api', 'main.js'));
}

start().catch((err) => {
  process.stderr.write(`npm start: could not compile the processes: ${err && err.message ? err.message : err}\n`);
  process.exit(1);
});
