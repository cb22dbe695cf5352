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

/** One subcommand of a group: its usage after `COMMAND SUB` (one string per form), and what it does with the arguments after SUB. */
interface Subcommand {
  usage: string | string[];
  run(ctx: Ctx, rest: string[], sub: string): Promise<void>;
}

/**
 * A command of subcommands (`timers list`, `kv get`): its usage, the line for a missing subcommand and
 * the one for an unknown subcommand are made from the one table, so each subcommand is named once. A
 * key `a|b` is two subcommands with one form (`switch on|off`). `needs`: how many arguments the command
 * takes at the least, and what the line for fewer says after the subcommands.
 */
function subcommands(name: string, summary: string, needs: { args: number; missing: string }, subs: Record<string, Subcommand>): Command {
  const table = Object.entries(subs).map(([key, sub]) => ({ names: key.split('|'), key, sub }));
  const names = table.flatMap((t) => t.names);
  return {
    usage: table.flatMap((t) => [t.sub.usage].flat().map((u) => `${name} ${t.key}${u && ` ${u}`}`)).join(' | '),
    summary,
    run(ctx) {
      const [sub, ...rest] = need(ctx, needs.args, names.join('|') + needs.missing);
      const found = table.find((t) => t.names.includes(sub));
      if (found === undefined) throw new UsageError(`${name} ${sub}: the subcommands are ${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}`);
      return found.sub.run(ctx, rest, sub);
    },
  };
}
const timerId = (sub: string, [id]: string[]): string => {
  if (id === undefined) throw new UsageError(`timers ${sub} needs a timer id`);
  return id;
};
const nsKey = (sub: string, [ns, key]: string[]): [string, string] => {
  if (key === undefined) throw new UsageError(`kv ${sub} needs NS KEY`);
  return [ns, key];
};

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
  dlq: subcommands('dlq', 'dead letters: list them, requeue or discard one, or all of a queue', { args: 2, missing: ' and its arguments' }, {
    list: { usage: 'QUEUE [--group G]', run: async (ctx, [queue]) => ctx.out(await ctx.queen().queue(queue).dlq({ group: group(ctx), limit: page(ctx).limit })) },
    'requeue|discard': {
      usage: ['PARTITION_ID TRANSACTION_ID [--group G]', '--all QUEUE [--group G] [--limit N]'],
      async run(ctx, rest, sub) {
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
  }),
  skip: {
    usage: 'skip QUEUE GROUP [--partition P]',
    summary: "move a consumer group's cursor to now (every message stored until now counts as finished)",
    run: async (ctx) => {
      const [queue, g] = need(ctx, 2, 'QUEUE GROUP');
      ctx.out(await ctx.operator().skip(queue, g, flag(ctx, 'partition')));
    },
  },
  timers: subcommands('timers', 'timers: list them (due, late, pending), peek, cancel or reschedule one', { args: 1, missing: '' }, {
    list: {
      usage: '[--queue Q] [--state all|due|late|pending]',
      async run(ctx) {
        const state = flag(ctx, 'state');
        if (state !== undefined && !['all', 'due', 'late', 'pending'].includes(state)) throw new UsageError('--state is all, due, late or pending');
        ctx.out(await ctx.operator().timers({ ...page(ctx), queue: flag(ctx, 'queue'), state: state as 'all' | undefined }));
      },
    },
    peek: { usage: 'ID', run: async (ctx, rest, sub) => ctx.out(await ctx.queen().timers.peek(timerId(sub, rest))) },
    cancel: { usage: 'ID', run: async (ctx, rest, sub) => ctx.out(await ctx.operator().cancelTimer(timerId(sub, rest))) },
    reschedule: {
      usage: 'ID (--at ISO | --in SECONDS)',
      async run(ctx, rest, sub) {
        const id = timerId(sub, rest);
        const at = flag(ctx, 'at');
        const inSeconds = flag(ctx, 'in');
        if ((at === undefined) === (inSeconds === undefined)) throw new UsageError('timers reschedule needs one of --at ISO-TIME or --in SECONDS');
        ctx.out(await ctx.operator().rescheduleTimer(id, at !== undefined ? { deliverAt: at } : { delaySeconds: Number(inSeconds) }));
      },
    },
  }),
  kv: subcommands('kv', 'keys: read one (with its value), write one, delete one, list a prefix (no values)', { args: 2, missing: ' NS ...' }, {
    get: { usage: 'NS KEY', run: async (ctx, rest, sub) => ctx.out(await ctx.operator().key(...nsKey(sub, rest))) },
    put: {
      usage: 'NS KEY JSON (--ttl SECONDS | --forever)',
      async run(ctx, rest, sub) {
        const [ns, key] = nsKey(sub, rest);
        const value = rest[2];
        if (value === undefined) throw new UsageError('kv put needs NS KEY JSON');
        let parsed: unknown;
        try {
          parsed = parseJson(value);
        } catch {
          throw new UsageError(`kv put: the value is not JSON: ${value.slice(0, 40)}`);
        }
        const ttl = flag(ctx, 'ttl');
        if ((ttl === undefined) === !ctx.flags.forever) throw new UsageError('kv put needs one of --ttl SECONDS or --forever (a key without an expiry is a choice)');
        ctx.out(await ctx.queen().kv.put(ns, key, parsed, ttl !== undefined ? { ttlSeconds: Number(ttl) } : { forever: true }));
      },
    },
    del: { usage: 'NS KEY', run: async (ctx, rest, sub) => ctx.out(await ctx.operator().deleteKey(...nsKey(sub, rest))) },
    prefix: { usage: 'NS [PREFIX]', run: async (ctx, [ns, prefix]) => ctx.out(await ctx.operator().keys(ns, { ...page(ctx), prefix })) },
  }),
  switch: subcommands('switch', 'the kill switches: show them, or turn one on or off for the whole cell', { args: 1, missing: '' }, {
    show: { usage: '', run: async (ctx) => ctx.out(await ctx.operator().switches()) },
    'on|off': {
      usage: 'kv|timersSchedule|timersFire [--reason TEXT]',
      async run(ctx, [name], sub) {
        if (name !== 'kv' && name !== 'timersSchedule' && name !== 'timersFire') throw new UsageError('the switches are kv, timersSchedule and timersFire');
        ctx.out(await ctx.operator().setSwitches({ [name]: sub === 'on' }, flag(ctx, 'reason')));
      },
    },
  }),
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
