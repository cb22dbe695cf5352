// npm run tenant:move -- <tenant> --from-db URL --from-cell NAME --to-db URL --to-cell NAME --router SOCKET ...
// Moves a tenant between cells (services/move/move.ts, docs/scaling.md "Moving a tenant"); run it
// again to finish a move that stopped, or with --abort to give up one that has not flipped.
// Exit 0 done, 1 the move stopped (the message says where and what to do), 2 a wrong command line.
import { parseArgs } from 'node:util';
import { abortMove, MoveError, moveTenant } from './move';
import { isUuid } from '../../shared/uuid';

const USAGE = `usage: npm run tenant:move -- <tenant uuid> --from-db URL --from-cell NAME --to-db URL --to-cell NAME --router SOCKET [--router SOCKET ...]
  [--map /etc/haproxy/placement.map] [--map-file FILE] [--fence-ms 1500] [--abort]
  --from-db/--to-db   each cell's PostgreSQL (its DATABASE_URL)
  --from-cell/--to-cell  each cell's backend name in the router (haproxy.cfg, placement.map)
  --router            every router's runtime API socket (level admin); the placement is flipped on each
  --map               the map as haproxy.cfg names it; --map-file the placement.map a restart reads, rewritten too
  --abort             give up a move that has not flipped: the target's copy goes, the source serves again`;

async function main(): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        'from-db': { type: 'string' }, 'from-cell': { type: 'string' }, 'to-db': { type: 'string' }, 'to-cell': { type: 'string' },
        router: { type: 'string', multiple: true }, map: { type: 'string' }, 'map-file': { type: 'string' }, 'fence-ms': { type: 'string' },
        abort: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  const { values: v, positionals } = parsed;
  if (v.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const tenant = positionals[0];
  const missing = ['from-db', 'from-cell', 'to-db', 'to-cell'].filter((k) => !v[k as keyof typeof v]);
  if (!tenant || !isUuid(tenant) || missing.length > 0 || !v.router?.length || (v['fence-ms'] !== undefined && !/^\d+$/.test(v['fence-ms']))) {
    process.stderr.write(`${!tenant || !isUuid(tenant) ? 'the tenant is a UUID' : missing.length ? `missing --${missing.join(', --')}` : !v.router?.length ? 'missing --router' : '--fence-ms is a whole number'}\n${USAGE}\n`);
    return 2;
  }
  const options = {
    tenant,
    from: { databaseUrl: v['from-db']!, cell: v['from-cell']! },
    to: { databaseUrl: v['to-db']!, cell: v['to-cell']! },
    routers: v.router,
    map: v.map ?? '/etc/haproxy/placement.map',
    mapFile: v['map-file'],
    fenceMs: v['fence-ms'] === undefined ? undefined : Number(v['fence-ms']),
    log: (line: string) => process.stderr.write(`${line}\n`),
  };
  try {
    if (v.abort) {
      await abortMove(options);
      process.stdout.write(`${JSON.stringify({ tenant, aborted: true, servedBy: options.from.cell })}\n`);
    } else {
      const result = await moveTenant(options);
      process.stdout.write(`${JSON.stringify({ tenant, servedBy: options.to.cell, ...result })}\n`);
    }
    return 0;
  } catch (err) {
    process.stderr.write(`tenant move stopped: ${err instanceof MoveError ? err.message : String(err)}\n`);
    return 1;
  }
}

main().then((code) => process.exit(code));
