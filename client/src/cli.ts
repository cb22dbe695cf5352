#!/usr/bin/env node
// `queen-kv`: the operator's command line, on the client (`Operator` for /api/v1/system/..., `Queen`
// for a tenant's own routes). Human tables on a terminal, one JSON line per answer with `--json`
// or when piped. Exit codes a script can branch on (EXIT below). The URL, token and tenant come
// from flags or the environment (QUEEN_URL, QUEEN_ADMIN_TOKEN, QUEEN_TENANT).
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { QueenError } from './errors';
import { parseJson, stringifyJson } from './json';
import { Operator, type OperatorAnswer } from './operator';
import { Queen } from './queen';

/** 0 done; 1 the cell refused (a 4xx: not found, bad input, not allowed); 2 the command line was wrong; 3 the cell was unreachable or unavailable (a 5xx, a timeout): retry. */
export const EXIT = { ok: 0, refused: 1, usage: 2, unavailable: 3 } as const;

class UsageError extends Error {}

interface Ctx {
  args: string[];
  flags: Record<string, string | boolean | undefined>;
  operator(): Operator;
  queen(): Queen;
  out(answer: unknown): void;
}

interface Command {
  usage: string;
  summary: string;
  run(ctx: Ctx): Promise<void>;
}

const GLOBAL_HELP = `Global flags:
  --url URL        the cell (QUEEN_URL; default http://127.0.0.1:6632)
  --token TOKEN    its QUEEN_ADMIN_TOKEN (QUEEN_ADMIN_TOKEN)
  --tenant UUID    the tenant to look at, on a cell with tenancy on (QUEEN_TENANT)
  --operator NAME  who is acting, for the cell's audit line (QUEEN_OPERATOR)
  --json           one JSON line per answer (the default when stdout is not a terminal)
  --limit N, --after X   one page of a list; the answer's next goes back as --after
  -h, --help       help for the command

Exit codes: 0 done, 1 the cell refused the call, 2 the command line was wrong, 3 the cell was unreachable or unavailable (retry).`;

const need = (ctx: Ctx, n: number, what: string): string[] => {
  if (ctx.args.length < n) throw new UsageError(`missing ${what}`);
  return ctx.args;
};
const flag = (ctx: Ctx, name: string): string | undefined => {
  const v = ctx.flags[name];
  return typeof v === 'string' ? v : undefined;
};
const page = (ctx: Ctx) => ({ limit: flag(ctx, 'limit') === undefined ? undefined : Number(flag(ctx, 'limit')), after: flag(ctx, 'after') });
const group = (ctx: Ctx) => flag(ctx, 'group');

/** The checkout of the cell this command runs in (start and migrate run its processes). */
function cellCheckout(): string {
  for (let dir = process.cwd(); ; dir = path.dirname(dir)) {
    const pkg = path.join(dir, 'package.json');
    if (fs.existsSync(pkg) && (JSON.parse(fs.readFileSync(pkg, 'utf8')) as { name?: string }).name === 'queen-kv') return dir;
    if (path.dirname(dir) === dir) throw new UsageError('start and migrate run the cell itself: run them inside a checkout of Queen KV (or use its image)');
  }
}

/** Runs `script` of the checkout in the foreground: its signals, its output, its exit code. */
function runCell(script: string[], args: string[]): Promise<void> {
  const root = cellCheckout();
  const child = spawn(process.execPath, [path.join(root, ...script), ...args], { stdio: 'inherit', cwd: root });
  for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => child.kill(signal));
  return new Promise((_, reject) => {
    child.on('error', reject);
    child.on('exit', (code, signal) => process.exit(code ?? (signal ? 128 + 15 : 1)));
  });
}

const COMMANDS: Record<string, Command> = {
  start: { usage: 'start [-- args]', summary: 'start the cell of this checkout (npm start: embedded PostgreSQL without DATABASE_URL)', run: (ctx) => runCell(['scripts', 'start.js'], ctx.args) },
  migrate: { usage: 'migrate', summary: "apply the schema to DATABASE_URL (the release command)", run: () => runCell(['dist', 'services', 'migrate.js'], []) },
  status: {
    usage: 'status',
    summary: 'readiness, the kill switches and the usage the sweeper last measured',
    async run(ctx) {
      const op = ctx.operator();
      const ready = await op.ready();
      const cluster = await op.cluster();
      ctx.out({ ready: ready?.status ?? 'ok', switches: cluster.switches, kvBytes: cluster.kvBytes, timerBytes: cluster.timerBytes, tenants: cluster.tenants });
    },
  },
  queues: { usage: 'queues', summary: "the tenant's queues: backlog, oldest unfinished age and dead letters per consumer group", run: async (ctx) => ctx.out(await ctx.operator().queues(page(ctx))) },
  partitions: { usage: 'partitions QUEUE', summary: "a queue's partitions and each group's cursor, backlog and leases", run: async (ctx) => ctx.out(await ctx.operator().partitions(need(ctx, 1, 'QUEUE')[0], page(ctx))) },
  messages: {
    usage: 'messages QUEUE PARTITION [--order oldest|newest] | messages --id PARTITION_ID TRANSACTION_ID',
    summary: "a partition's messages (no payloads), or one message with its payload and failures",
    async run(ctx) {
      const op = ctx.operator();
      const [a, b] = need(ctx, 2, 'QUEUE PARTITION (or --id PARTITION_ID TRANSACTION_ID)');
      if (ctx.flags.id) return ctx.out(await op.message(a, b));
      const order = flag(ctx, 'order');
      if (order !== undefined && order !== 'oldest' && order !== 'newest') throw new UsageError('--order is oldest or newest');
      ctx.out(await op.messages(a, b, { ...page(ctx), order: order as 'oldest' | 'newest' | undefined }));
    },
  },
  dlq: {
    usage: 'dlq list QUEUE [--group G] | dlq requeue|discard PARTITION_ID TRANSACTION_ID [--group G] | dlq requeue|discard --all QUEUE [--group G] [--limit N]',
    summary: 'dead letters: list them, requeue or discard one, or all of a queue',
    async run(ctx) {
      const [sub, ...rest] = need(ctx, 2, 'list|requeue|discard and its arguments');
      if (sub === 'list') {
        ctx.out(await ctx.queen().queue(rest[0]).dlq({ group: group(ctx), limit: page(ctx).limit }));
        return;
      }
      if (sub !== 'requeue' && sub !== 'discard') throw new UsageError(`dlq ${sub}: the subcommands are list, requeue and discard`);
      const op = ctx.operator();
      if (ctx.flags.all) {
        const o = { consumerGroup: group(ctx), limit: page(ctx).limit };
        ctx.out(sub === 'requeue' ? await op.requeueAll(rest[0], o) : await op.discardAll(rest[0], o));
        return;
      }
      if (rest.length < 2) throw new UsageError(`dlq ${sub} needs PARTITION_ID TRANSACTION_ID, or --all QUEUE`);
      ctx.out(sub === 'requeue' ? await op.requeue(rest[0], rest[1], group(ctx)) : await op.discard(rest[0], rest[1], group(ctx)));
    },
  },
  skip: {
    usage: 'skip QUEUE GROUP [--partition P]',
    summary: "move a consumer group's cursor to now (every message stored until now counts as finished)",
    run: async (ctx) => {
      const [queue, g] = need(ctx, 2, 'QUEUE GROUP');
      ctx.out(await ctx.operator().skip(queue, g, flag(ctx, 'partition')));
    },
  },
  timers: {
    usage: 'timers list [--queue Q] [--state all|due|late|pending] | timers peek ID | timers cancel ID | timers reschedule ID (--at ISO | --in SECONDS)',
    summary: 'timers: list them (due, late, pending), peek, cancel or reschedule one',
    async run(ctx) {
      const [sub, id] = need(ctx, 1, 'list|peek|cancel|reschedule');
      const op = ctx.operator();
      if (sub === 'list') {
        const state = flag(ctx, 'state');
        if (state !== undefined && !['all', 'due', 'late', 'pending'].includes(state)) throw new UsageError('--state is all, due, late or pending');
        return ctx.out(await op.timers({ ...page(ctx), queue: flag(ctx, 'queue'), state: state as 'all' | undefined }));
      }
      if (id === undefined) throw new UsageError(`timers ${sub} needs a timer id`);
      if (sub === 'peek') return ctx.out(await ctx.queen().timers.peek(id));
      if (sub === 'cancel') return ctx.out(await op.cancelTimer(id));
      if (sub === 'reschedule') {
        const at = flag(ctx, 'at');
        const inSeconds = flag(ctx, 'in');
        if ((at === undefined) === (inSeconds === undefined)) throw new UsageError('timers reschedule needs one of --at ISO-TIME or --in SECONDS');
        return ctx.out(await op.rescheduleTimer(id, at !== undefined ? { deliverAt: at } : { delaySeconds: Number(inSeconds) }));
      }
      throw new UsageError(`timers ${sub}: the subcommands are list, peek, cancel and reschedule`);
    },
  },
  kv: {
    usage: 'kv get NS KEY | kv put NS KEY JSON (--ttl SECONDS | --forever) | kv del NS KEY | kv prefix NS [PREFIX]',
    summary: 'keys: read one (with its value), write one, delete one, list a prefix (no values)',
    async run(ctx) {
      const [sub, ns, key, value] = need(ctx, 2, 'get|put|del|prefix NS ...');
      const op = ctx.operator();
      if (sub === 'prefix') return ctx.out(await op.keys(ns, { ...page(ctx), prefix: key }));
      if (key === undefined) throw new UsageError(`kv ${sub} needs NS KEY`);
      if (sub === 'get') return ctx.out(await op.key(ns, key));
      if (sub === 'del') return ctx.out(await op.deleteKey(ns, key));
      if (sub === 'put') {
        if (value === undefined) throw new UsageError('kv put needs NS KEY JSON');
        let parsed: unknown;
        try {
          parsed = parseJson(value);
        } catch {
          throw new UsageError(`kv put: the value is not JSON: ${value.slice(0, 40)}`);
        }
        const ttl = flag(ctx, 'ttl');
        if ((ttl === undefined) === !ctx.flags.forever) throw new UsageError('kv put needs one of --ttl SECONDS or --forever (a key without an expiry is a choice)');
        return ctx.out(await ctx.queen().kv.put(ns, key, parsed, ttl !== undefined ? { ttlSeconds: Number(ttl) } : { forever: true }));
      }
      throw new UsageError(`kv ${sub}: the subcommands are get, put, del and prefix`);
    },
  },
  switch: {
    usage: 'switch show | switch on|off kv|timersSchedule|timersFire [--reason TEXT]',
    summary: 'the kill switches: show them, or turn one on or off for the whole cell',
    async run(ctx) {
      const [sub, name] = need(ctx, 1, 'show|on|off');
      const op = ctx.operator();
      if (sub === 'show') return ctx.out(await op.switches());
      if (sub !== 'on' && sub !== 'off') throw new UsageError(`switch ${sub}: the subcommands are show, on and off`);
      if (name !== 'kv' && name !== 'timersSchedule' && name !== 'timersFire') throw new UsageError('the switches are kv, timersSchedule and timersFire');
      ctx.out(await op.setSwitches({ [name]: sub === 'on' }, flag(ctx, 'reason')));
    },
  },
  tenants: { usage: 'tenants', summary: 'tenants with their grants, quotas, usage and rate limits', run: async (ctx) => ctx.out(await ctx.operator().tenants(page(ctx))) },
};

function help(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((n) => n.length));
  return `queen-kv: look at and act on a Queen KV cell.\n\nUsage: queen-kv COMMAND [ARGS] [FLAGS]\n\nCommands:\n${Object.entries(COMMANDS)
    .map(([n, c]) => `  ${n.padEnd(width)}  ${c.summary}`)
    .join('\n')}\n\n${GLOBAL_HELP}\n`;
}

// ---- output ----------------------------------------------------------------------------------
const cell = (v: unknown): string => {
  if (v === null || v === undefined) return '';
  const s = typeof v === 'object' ? stringifyJson(v) : String(v);
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
};

/** A list answer (one array of rows) as a table, the rest of the answer as lines below it. */
function human(answer: unknown): string {
  if (answer === null || typeof answer !== 'object') return `${cell(answer)}\n`;
  const entries = Object.entries(answer as OperatorAnswer);
  const lists = entries.filter(([, v]) => Array.isArray(v) && v.every((r) => r !== null && typeof r === 'object' && !Array.isArray(r)));
  const lines: string[] = [];
  if (lists.length === 1 && (lists[0][1] as unknown[]).length > 0) {
    const rows = lists[0][1] as OperatorAnswer[];
    const columns = [...new Set(rows.flatMap((r) => Object.keys(r)))];
    const widths = columns.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]).length)));
    lines.push(columns.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd());
    for (const r of rows) lines.push(columns.map((c, i) => cell(r[c]).padEnd(widths[i])).join('  ').trimEnd());
  }
  for (const [k, v] of entries) if (!(lists.length === 1 && k === lists[0][0] && (v as unknown[]).length > 0)) lines.push(`${k}: ${cell(v)}`);
  return `${lines.join('\n')}\n`;
}

// ---- main ------------------------------------------------------------------------------------
export async function main(argv: string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        url: { type: 'string' },
        token: { type: 'string' },
        tenant: { type: 'string' },
        operator: { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        limit: { type: 'string' },
        after: { type: 'string' },
        group: { type: 'string' },
        order: { type: 'string' },
        id: { type: 'boolean' },
        all: { type: 'boolean' },
        partition: { type: 'string' },
        queue: { type: 'string' },
        state: { type: 'string' },
        at: { type: 'string' },
        in: { type: 'string' },
        ttl: { type: 'string' },
        forever: { type: 'boolean' },
        reason: { type: 'string' },
      },
    });
  } catch (err) {
    process.stderr.write(`queen-kv: ${(err as Error).message}\n\n${help()}`);
    return EXIT.usage;
  }
  const [name, ...args] = parsed.positionals;
  const command = name === undefined ? undefined : COMMANDS[name];
  if (parsed.values.help || name === undefined || name === 'help') {
    const target = name === 'help' ? COMMANDS[args[0] ?? ''] : command;
    process.stdout.write(target ? `Usage: queen-kv ${target.usage}\n\n${target.summary}.\n\n${GLOBAL_HELP}\n` : help());
    return name === undefined && !parsed.values.help ? EXIT.usage : EXIT.ok;
  }
  if (command === undefined) {
    process.stderr.write(`queen-kv: no command ${JSON.stringify(name)}\n\n${help()}`);
    return EXIT.usage;
  }
  const flags = parsed.values as Ctx['flags'];
  const url = (flags.url as string | undefined) ?? env.QUEEN_URL ?? 'http://127.0.0.1:6632';
  const token = (flags.token as string | undefined) ?? env.QUEEN_ADMIN_TOKEN;
  const tenant = (flags.tenant as string | undefined) ?? env.QUEEN_TENANT;
  const operatorName = (flags.operator as string | undefined) ?? env.QUEEN_OPERATOR;
  const json = flags.json === true || !process.stdout.isTTY;
  if (flags.limit !== undefined && !/^[0-9]+$/.test(String(flags.limit))) {
    process.stderr.write('queen-kv: --limit is a whole number\n');
    return EXIT.usage;
  }
  const opened: Array<{ close(): unknown }> = [];
  const ctx: Ctx = {
    args,
    flags,
    operator: () => {
      const o = new Operator({ url, token, tenant, operator: operatorName, retry: false });
      opened.push(o);
      return o;
    },
    queen: () => {
      const q = new Queen({ url, tenant, bearerToken: token, retry: false });
      opened.push(q);
      return q;
    },
    out: (answer) => process.stdout.write(json ? `${stringifyJson(answer)}\n` : human(answer)),
  };
  try {
    await command.run(ctx);
    return EXIT.ok;
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`queen-kv ${name}: ${err.message}\nUsage: queen-kv ${command.usage}\n`);
      return EXIT.usage;
    }
    if (err instanceof QueenError) {
      const unavailable = err.status === 0 || err.status >= 500;
      process.stderr.write(`queen-kv ${name}: ${err.code}: ${err.message}\n`);
      if (json) process.stdout.write(`${stringifyJson({ error: err.code, status: err.status, message: err.message })}\n`);
      return unavailable ? EXIT.unavailable : EXIT.refused;
    }
    throw err;
  } finally {
    for (const o of opened) o.close();
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`queen-kv: ${(err as Error).stack ?? err}\n`);
      process.exit(EXIT.unavailable);
    },
  );
}
