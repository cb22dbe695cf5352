// The console's pages: each takes the answer of an operator read (the same statement and rules as
// the /api/v1/system/ routes, docs/operator-routes.md) and renders it. No page reads anything the
// operator routes do not, and none carries a value or payload but the one-message and one-key pages.
import { html, Safe, seg, query, bytes, age } from './html';

/** What every page's links and forms carry: the tenant (under tenancy) and the CSRF token. */
export interface Ctx {
  tenant: string | null;
  csrf: string;
}

/** A group is stuck, for the overview's mark, when its oldest unfinished message is older than this. */
export const STUCK_SECONDS = 60;

const q = (ctx: Ctx, more: Record<string, string | number | null | undefined> = {}) => query({ tenant: ctx.tenant, ...more });
const hidden = (ctx: Ctx) => html`<input type="hidden" name="csrf" value="${ctx.csrf}">`;
const when = (t: unknown) => (t ? html`<time>${t}</time>` : html`<span class="none">never</span>`);
const queueLink = (ctx: Ctx, name: string) => html`<a href="/console/queues/${seg(name)}${q(ctx)}">${name}</a>`;
const more = (href: string | null) => (href ? html`<p class="more"><a href="${href}">Next page</a></p>` : '');

/** A POST button in its own form: the action, the CSRF token, any hidden fields. */
export function button(ctx: Ctx, action: string, label: string, fields: Record<string, string> = {}, cls = ''): Safe {
  return html`<form method="post" action="${action}${q(ctx)}" class="inline">${hidden(ctx)}${Object.entries(fields).map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`)}<button type="submit" class="${cls}">${label}</button></form>`;
}

export function login(error: string | null): Safe {
  return html`${error ? html`<p class="error" role="alert">${error}</p>` : ''}
<form method="post" action="/console/login" class="login">
<label for="token">Admin token (QUEEN_ADMIN_TOKEN)</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<label for="operator">Your name (for the audit log)</label>
<input id="operator" name="operator" autocomplete="username" required maxlength="64" pattern="[A-Za-z0-9._@:+\-]{1,64}">
<button type="submit" id="sign-in">Sign in</button>
</form>`;
}

export function failure(status: number, code: string, message: string, back: string): Safe {
  return html`<p class="error" role="alert"><strong>${status} ${code}</strong>: ${message}</p><p><a href="${back}">Back to the overview</a></p>`;
}

interface Switches { kv: boolean; timersSchedule: boolean; timersFire: boolean }
interface Usage { kvBytes: string; timerBytes: string; tenants: Array<Record<string, any>> }

function switchesTable(s: Switches): Safe {
  const row = (name: string, on: boolean, what: string) => html`<tr><th>${name}</th><td class="${on ? 'on' : 'off'}">${on ? 'on' : 'off (paused)'}</td><td>${what}</td></tr>`;
  return html`<section><h3>Kill switches (this worker's state)</h3><table class="switches"><thead><tr><th>switch</th><th>state</th><th>what it gates</th></tr></thead><tbody>
${row('kv', s.kv, 'every KV read and write')}${row('timersSchedule', s.timersSchedule, 'new timers')}${row('timersFire', s.timersFire, 'the sweeper firing due timers')}
</tbody></table><p class="hint">Flipped with <code>POST /api/v1/system/kv-timers</code> (docs/operations.md).</p></section>`;
}

function usageTable(u: Usage, tenant: string | null): Safe {
  const mine = tenant === null ? u.tenants : u.tenants.filter((t) => t.tenantId === tenant);
  return html`<section><h3>Usage (the sweeper's last measurement)</h3>
<p>KV ${bytes(u.kvBytes)}, timers ${bytes(u.timerBytes)} across ${u.tenants.length} tenant(s).</p>
${mine.length === 0 ? html`<p class="none">No measurement${tenant ? ' for this tenant' : ''} yet.</p>` : html`<table><thead><tr><th>tenant</th><th>rows</th><th>bytes</th><th>timers</th><th>timer bytes</th><th>measured at</th></tr></thead><tbody>
${mine.slice(0, 50).map((t) => html`<tr><td class="id">${t.tenantId}</td><td>${t.rows}</td><td>${bytes(t.bytes)}</td><td>${t.timers}</td><td>${bytes(t.timerBytes)}</td><td>${when(t.computedAt)}</td></tr>`)}
</tbody></table>`}</section>`;
}

/** Under tenancy with no tenant chosen: the tenants the cell knows, and a box for any other. */
export function tenantPicker(tenants: Array<Record<string, any>>): Safe {
  return html`<section><h3>Choose a tenant</h3>
<form method="get" action="/console" class="picker"><label for="tenant">Tenant id</label> <input id="tenant" name="tenant" pattern="[0-9a-fA-F-]{36}" required> <button type="submit">Look</button></form>
<ul class="tenants">${tenants.map((t) => html`<li><a href="/console${query({ tenant: t.tenantId })}">${t.tenantId}</a> (${t.queues} queue(s))</li>`)}</ul></section>`;
}

/** A sweeper's report older than this (three of its report intervals) is shown silent and left out of the cell's rung. */
export const SILENT_SECONDS = 30;

const RUNGS = ['calm: nothing shed', 'pruning suspended', 'pruning and the usage rollup suspended'];

/** The cell's state from queen.operator_overview_v1: the sweepers' rungs, throughput, timers, connections. */
export interface CellState {
  now: string;
  sweepers: Array<{ id: string; rung: number; suspended: string[]; batch: number; baseBatch: number; sleepMs: number; baseSleepMs: number; reportedAt: string; silentSeconds: number }>;
  throughput: { sampledAt: string; lastMinute: Window | null; last5Minutes: Window | null } | null;
  timers: { due: number; late: number; countedUpTo: number; lateSeconds: number; oldestDueSeconds: number | null };
  connections: { maxConnections: number; server: number; groups: Array<{ applicationName: string; state: string; connections: number }> };
}
interface Window { spanSeconds: number; pushed: number; completed: number; failed: number }

function sheddingTable(c: CellState): Safe {
  const live = c.sweepers.filter((w) => w.silentSeconds < SILENT_SECONDS);
  const rung = live.length === 0 ? null : Math.max(...live.map((w) => Number(w.rung)));
  const summary = rung === null
    ? html`<p class="flag" data-rung="none"><strong>No sweeper has reported in the last ${SILENT_SECONDS} s</strong>: due timers are not firing and expired keys are not pruned until one runs.</p>`
    : html`<p data-rung="${rung}">Shedding rung <strong class="${rung > 0 ? 'flag' : 'on'}">${rung}</strong> of 2: ${RUNGS[rung] ?? ''} (the highest of ${live.length} live sweeper(s); firing is never shed).</p>`;
  return html`<section><h3>Sweepers and the shedding ladder</h3>${summary}
${c.sweepers.length === 0 ? '' : html`<table class="sweepers"><thead><tr><th>sweeper</th><th>rung</th><th>suspended</th><th>batch</th><th>sleep</th><th>reported</th></tr></thead><tbody>
${c.sweepers.map((w) => html`<tr class="${w.silentSeconds >= SILENT_SECONDS ? 'stuck' : ''}"><td class="id">${w.id}</td><td>${w.rung}</td><td>${w.suspended.length ? w.suspended.join(', ') : html`<span class="none">none</span>`}</td>
<td>${w.batch} of ${w.baseBatch}</td><td>${w.sleepMs} ms (base ${w.baseSleepMs})</td><td>${age(w.silentSeconds)} ago${w.silentSeconds >= SILENT_SECONDS ? html` <strong class="flag">silent</strong>` : ''}</td></tr>`)}
</tbody></table>`}<p class="hint">Each sweeper writes its rung when it changes and every 10 s (docs/limits.md, the order of shedding).</p></section>`;
}

function throughputTable(c: CellState): Safe {
  const t = c.throughput;
  const row = (label: string, w: Window | null) => {
    if (w === null) return html`<tr><th>${label}</th><td colspan="4" class="none">not yet two samples</td></tr>`;
    const per = (n: number) => (w.spanSeconds > 0 ? (n / w.spanSeconds).toFixed(1) : '');
    return html`<tr><th>${label}</th><td>${w.spanSeconds} s</td><td>${w.pushed} (${per(w.pushed)}/s)</td><td>${w.completed} (${per(w.completed)}/s)</td><td>${w.failed}</td></tr>`;
  };
  return html`<section><h3>Throughput (all tenants)</h3>${t === null ? html`<p class="none">No sample yet: the sweepers sample the log's counters every 10 s.</p>` : html`<table class="throughput"><thead><tr><th>window</th><th>span</th><th>pushed</th><th>acked (completed)</th><th>failed deliveries</th></tr></thead><tbody>
${row('last minute', t.lastMinute)}${row('last 5 minutes', t.last5Minutes)}
</tbody></table><p class="hint">From the sweepers' samples of the log's counters, the newest at <time>${t.sampledAt}</time>.</p>`}</section>`;
}

function timersTable(ctx: Ctx, c: CellState, tenancy: boolean): Safe {
  const t = c.timers;
  const n = (v: number) => (v >= t.countedUpTo ? `${v}+` : String(v));
  const link = (state: string, label: string) => (tenancy && ctx.tenant === null ? label : html`<a href="/console/timers${q(ctx, { state })}">${label}</a>`);
  return html`<section><h3>Timers (all tenants)</h3><table class="timer-counts"><tbody>
<tr><th>${link('due', 'due now')}</th><td data-timers="due">${n(t.due)}</td></tr>
<tr><th>${link('late', `late (due ${t.lateSeconds} s or more)`)}</th><td data-timers="late" class="${t.late > 0 ? 'flag' : ''}">${n(t.late)}</td></tr>
<tr><th>oldest due</th><td>${t.oldestDueSeconds === null ? html`<span class="none">none due</span>` : `${age(t.oldestDueSeconds)} ago`}</td></tr>
</tbody></table></section>`;
}

function connectionsTable(c: CellState): Safe {
  const k = c.connections;
  return html`<section><h3>Connections (every worker's pools, the sweepers, the listeners)</h3>
<p>${k.server} client connection(s) on the server of <code>max_connections</code> ${k.maxConnections}; to this database, by application and state:</p>
<table class="connections"><thead><tr><th>application_name</th><th>state</th><th>connections</th></tr></thead><tbody>
${k.groups.map((g) => html`<tr><td>${g.applicationName || html`<span class="none">none</span>`}</td><td>${g.state || html`<span class="none">unknown</span>`}</td><td>${g.connections}</td></tr>`)}
</tbody></table><p class="hint">From <code>pg_stat_activity</code>: <code>queen-api</code> is the workers' message and KV pools, <code>queen-sweeper</code> the sweepers'; <code>active</code> is a statement running, <code>idle</code> a pooled connection free.</p></section>`;
}

export function overview(ctx: Ctx, switches: Switches, cell: CellState, tenancy: boolean, usage: Usage, queues: { queues: Array<Record<string, any>>; next: string | null } | null, picker: Safe | null): Safe {
  const queueRows = queues === null ? '' : html`<section><h3>Queues</h3>
${queues.queues.length === 0 ? html`<p class="none">No queues.</p>` : html`<table class="queues"><thead><tr><th>queue</th><th>partitions</th><th>consumer group</th><th>backlog</th><th>oldest unfinished</th><th>dead letters</th></tr></thead><tbody>
${queues.queues.map((queue) => {
    const groups: Array<Record<string, any>> = queue.groups.length ? queue.groups : [{ consumerGroup: null, backlog: 0, deadLetters: 0, oldestUnconsumedSeconds: null }];
    return groups.map((g, i) => {
      const stuck = g.oldestUnconsumedSeconds !== null && g.oldestUnconsumedSeconds >= STUCK_SECONDS;
      return html`<tr class="${stuck ? 'stuck' : ''}" data-queue="${queue.name}" data-group="${g.consumerGroup ?? ''}">
${i === 0 ? html`<td rowspan="${groups.length}">${queueLink(ctx, queue.name)}</td><td rowspan="${groups.length}">${queue.partitions}</td>` : ''}
<td>${g.consumerGroup ?? html`<span class="none">none</span>`}</td><td>${g.backlog}</td>
<td>${g.oldestUnconsumedSeconds === null ? html`<span class="none">none</span>` : html`${age(g.oldestUnconsumedSeconds)}${stuck ? html` <strong class="flag">stuck</strong>` : ''}`}</td>
<td>${g.deadLetters > 0 ? html`<a href="/console/queues/${seg(queue.name)}/dead-letters${q(ctx, { consumerGroup: g.consumerGroup })}">${g.deadLetters}</a>` : '0'}</td></tr>`;
    });
  })}
</tbody></table>`}${more(queues.next ? `/console${q(ctx, { after: queues.next })}` : null)}</section>`;
  return html`${picker ?? ''}<div class="cell">${sheddingTable(cell)}${throughputTable(cell)}${timersTable(ctx, cell, tenancy)}${switchesTable(switches)}${connectionsTable(cell)}${usageTable(usage, ctx.tenant)}</div>${queueRows}`;
}

export function partitions(ctx: Ctx, a: { queue: string; partitions: Array<Record<string, any>>; next: string | null }): Safe {
  const groups = [...new Set(a.partitions.flatMap((p) => p.groups.map((g: Record<string, any>) => g.consumerGroup as string)))].sort();
  return html`<p><a href="/console/queues/${seg(a.queue)}/dead-letters${q(ctx)}">Dead letters of ${a.queue}</a></p>
${groups.length === 0 ? '' : html`<section><h3>Move a group to now</h3><p class="hint">Counts every message stored until now as finished for the group, on every partition, and ends its leases; other groups are untouched.</p>
<p class="groups">${groups.map((g) => html`<span data-group="${g}">${button(ctx, `/console/queues/${seg(a.queue)}/groups/${seg(g)}/skip`, `Skip ${g} to now`, {}, 'danger')} </span>`)}</p></section>`}
${a.partitions.length === 0 ? html`<p class="none">No partitions.</p>` : html`<table><thead><tr><th>partition</th><th>last seq</th><th>consumer group</th><th>cursor</th><th>backlog</th><th>oldest unfinished</th><th>lease until</th><th>dead letters</th></tr></thead><tbody>
${a.partitions.map((p) => {
    const groups: Array<Record<string, any>> = p.groups.length ? p.groups : [{ consumerGroup: null }];
    return groups.map((g, i) => html`<tr>${i === 0 ? html`<td rowspan="${groups.length}"><a href="/console/queues/${seg(a.queue)}/partitions/${seg(p.name)}${q(ctx)}">${p.name}</a></td><td rowspan="${groups.length}">${p.lastSeq}</td>` : ''}
<td>${g.consumerGroup ?? html`<span class="none">none</span>`}</td><td>${g.cursor ?? ''}</td><td>${g.backlog ?? ''}</td><td>${age(g.oldestUnconsumedSeconds)}</td><td>${g.leaseExpiresAt ?? ''}</td><td>${g.deadLetters ?? ''}</td></tr>`);
  })}
</tbody></table>`}${more(a.next ? `/console/queues/${seg(a.queue)}${q(ctx, { after: a.next })}` : null)}`;
}

export function messages(ctx: Ctx, a: { queue: string; partition: string; partitionId: string; order: string; messages: Array<Record<string, any>>; next: string | null }): Safe {
  const base = `/console/queues/${seg(a.queue)}/partitions/${seg(a.partition)}`;
  return html`<p>Partition id <code>${a.partitionId}</code>, ${a.order === 'newest' ? html`newest first (<a href="${base}${q(ctx, { order: 'oldest' })}">oldest first</a>)` : html`oldest first (<a href="${base}${q(ctx, { order: 'newest' })}">newest first</a>)`}</p>
${a.messages.length === 0 ? html`<p class="none">No messages.</p>` : html`<table><thead><tr><th>seq</th><th>transaction id</th><th>created</th><th>bytes</th><th>sealed</th><th>dead in groups</th></tr></thead><tbody>
${a.messages.map((m) => html`<tr><td>${m.seq}</td><td><a href="/console/messages/${seg(a.partitionId)}/${seg(m.transactionId)}${q(ctx)}">${m.transactionId}</a></td><td>${when(m.createdAt)}</td><td>${bytes(m.bytes)}</td><td>${m.sealed ? 'yes' : ''}</td><td>${m.deadLetters || ''}</td></tr>`)}
</tbody></table>`}${more(a.next ? `${base}${q(ctx, { order: a.order, after: a.next })}` : null)}`;
}

export function message(ctx: Ctx, m: Record<string, any>): Safe {
  const action = (what: string) => `/console/messages/${seg(m.partitionId)}/${seg(m.transactionId)}/${what}`;
  const payload = m.dataOmitted ? html`<p class="none">Payload of ${bytes(m.bytes)} is larger than the console shows (1 MiB).</p>`
    : m.sealedUnreadable ? html`<p class="none">Sealed with a key this process does not hold.</p>`
      : html`<pre class="payload">${JSON.stringify(m.data, null, 2)}</pre>`;
  return html`<dl><dt>queue</dt><dd>${queueLink(ctx, m.queue)}</dd><dt>partition</dt><dd><a href="/console/queues/${seg(m.queue)}/partitions/${seg(m.partition)}${q(ctx)}">${m.partition}</a></dd>
<dt>seq</dt><dd>${m.seq}</dd><dt>transaction id</dt><dd><code>${m.transactionId}</code></dd><dt>created</dt><dd>${when(m.createdAt)}</dd><dt>bytes</dt><dd>${bytes(m.bytes)}</dd></dl>
<h3>Payload</h3>${payload}
<h3>Consumer groups</h3>
${m.groups.length === 0 ? html`<p class="none">No group has this partition.</p>` : html`<table><thead><tr><th>group</th><th>state</th><th>failures</th><th>last failure</th><th>dead-lettered</th><th>last error</th><th></th></tr></thead><tbody>
${m.groups.map((g: Record<string, any>) => html`<tr><td>${g.consumerGroup}</td><td>${g.state}</td><td>${g.failures}</td><td>${g.lastFailedAt ?? ''}</td><td>${g.deadLetteredAt ?? ''}</td><td>${g.errorMessage ?? ''}</td>
<td>${g.state === 'deadLettered' ? html`${button(ctx, action('requeue'), 'Requeue', { consumerGroup: g.consumerGroup })} ${button(ctx, action('discard'), 'Discard', { consumerGroup: g.consumerGroup }, 'danger')}` : ''}</td></tr>`)}
</tbody></table>`}`;
}

export function deadLetters(ctx: Ctx, queue: string, group: string | null, a: { messages: Array<Record<string, any>>; total: number }, offset: number, limit: number): Safe {
  const base = `/console/queues/${seg(queue)}/dead-letters`;
  const all: Record<string, string> = group === null ? {} : { consumerGroup: group };
  return html`<p>${a.total} dead letter(s)${group ? html` for group <strong>${group}</strong> (<a href="${base}${q(ctx)}">all groups</a>)` : ''}, oldest first.</p>
${a.total === 0 ? '' : html`<p class="bulk">${button(ctx, `${base}/requeue`, `Requeue the oldest ${Math.min(a.total, 100)}`, all)} ${button(ctx, `${base}/discard`, `Discard the oldest ${Math.min(a.total, 100)}`, all, 'danger')}</p>`}
${a.messages.length === 0 ? html`<p class="none">No dead letters.</p>` : html`<table class="dead-letters"><thead><tr><th>transaction id</th><th>partition</th><th>group</th><th>failures</th><th>failed at</th><th>last error</th><th></th></tr></thead><tbody>
${a.messages.map((d) => {
    const action = (what: string) => `/console/messages/${seg(d.partitionId)}/${seg(d.transactionId)}/${what}`;
    const fields = { consumerGroup: d.consumerGroup as string, back: 'dead-letters' };
    return html`<tr data-transaction="${d.transactionId}"><td><a href="/console/messages/${seg(d.partitionId)}/${seg(d.transactionId)}${q(ctx)}">${d.transactionId}</a></td><td>${d.partition}</td><td>${d.consumerGroup}</td><td>${d.retryCount}</td><td>${when(d.failedAt)}</td><td>${d.errorMessage ?? ''}</td>
<td>${button(ctx, action('requeue'), 'Requeue', fields)} ${button(ctx, action('discard'), 'Discard', fields, 'danger')}</td></tr>`;
  })}
</tbody></table>`}${more(offset + limit < a.total ? `${base}${q(ctx, { consumerGroup: group, offset: offset + limit })}` : null)}`;
}

export function timers(ctx: Ctx, state: string, queue: string | null, a: { timers: Array<Record<string, any>>; now: string; next: string | null }): Safe {
  const tab = (s: string, label: string) => (s === state ? html`<strong>${label}</strong>` : html`<a href="/console/timers${q(ctx, { state: s, queue })}">${label}</a>`);
  return html`<p class="tabs">${tab('all', 'All')} · ${tab('due', 'Due')} · ${tab('late', 'Late')} · ${tab('pending', 'Pending')}${queue ? html` · queue <strong>${queue}</strong>` : ''}</p>
<p>Judged at <time>${a.now}</time>.</p>
${a.timers.length === 0 ? html`<p class="none">No timers.</p>` : html`<table class="timers"><thead><tr><th>timer id</th><th>key</th><th>queue</th><th>partition</th><th>deliver at</th><th>state</th><th>bytes</th><th></th></tr></thead><tbody>
${a.timers.map((t) => html`<tr data-timer="${t.timerId}"><td class="id">${t.timerId}</td><td>${t.timerKey ?? ''}</td><td>${queueLink(ctx, t.queue)}</td><td>${t.partition}</td><td><time>${t.deliverAt}</time></td><td>${t.late ? html`<strong class="flag">late</strong>` : t.due ? 'due' : 'pending'}</td><td>${bytes(t.bytes)}</td>
<td>${button(ctx, `/console/timers/${seg(t.timerId)}/cancel`, 'Cancel', { state }, 'danger')}</td></tr>`)}
</tbody></table>`}${more(a.next ? `/console/timers${q(ctx, { state, queue, after: a.next })}` : null)}`;
}

export function kvForm(ctx: Ctx, ns: string | null, prefix: string | null): Safe {
  return html`<form method="get" action="/console/kv" class="picker">${ctx.tenant ? html`<input type="hidden" name="tenant" value="${ctx.tenant}">` : ''}
<label for="ns">Namespace</label> <input id="ns" name="ns" value="${ns ?? ''}" required> <label for="prefix">Prefix</label> <input id="prefix" name="prefix" value="${prefix ?? ''}"> <button type="submit">Browse</button></form>`;
}

export function kvKeys(ctx: Ctx, a: { namespace: string; prefix: string | null; keys: Array<Record<string, any>>; next: string | null }): Safe {
  return html`${kvForm(ctx, a.namespace, a.prefix)}
${a.keys.length === 0 ? html`<p class="none">No live keys${a.prefix ? ' under this prefix' : ''}.</p>` : html`<table class="keys"><thead><tr><th>key</th><th>version</th><th>bytes</th><th>updated</th><th>expires</th></tr></thead><tbody>
${a.keys.map((k) => html`<tr><td><a href="/console/kv/${seg(a.namespace)}/keys/${seg(k.key)}${q(ctx)}">${k.key}</a></td><td>${k.version}</td><td>${bytes(k.bytes)}</td><td>${when(k.updatedAt)}</td><td>${k.expiresAt ?? html`<span class="none">never</span>`}</td></tr>`)}
</tbody></table>`}${more(a.next ? `/console/kv/${seg(a.namespace)}${q(ctx, { prefix: a.prefix, after: a.next })}` : null)}`;
}

export function kvKey(ctx: Ctx, k: Record<string, any>): Safe {
  return html`<p><a href="/console/kv/${seg(k.namespace)}${q(ctx)}">Keys of ${k.namespace}</a></p>
<dl><dt>key</dt><dd><code>${k.key}</code></dd><dt>version</dt><dd>${k.version}</dd><dt>bytes</dt><dd>${bytes(k.bytes)}</dd><dt>created</dt><dd>${when(k.createdAt)}</dd><dt>updated</dt><dd>${when(k.updatedAt)}</dd><dt>expires</dt><dd>${k.expiresAt ?? 'never'}</dd></dl>
<h3>Value</h3><pre class="payload">${JSON.stringify(k.value, null, 2)}</pre>
<p>${button(ctx, `/console/kv/${seg(k.namespace)}/keys/${seg(k.key)}/delete`, 'Delete this key', {}, 'danger')}</p>`;
}

export function tenants(ctx: Ctx, tenancy: boolean, a: { tenants: Array<Record<string, any>>; next: string | null; rateLimits: Record<string, number>; requireGrant: boolean }): Safe {
  const limit = (v: unknown) => (v === null || v === undefined ? html`<span class="none">none</span>` : String(v));
  return html`<p>Rate limits per tenant: KV reads ${a.rateLimits.kvReadsPerSec}/s (burst ${a.rateLimits.kvReadsBurst}), writes ${a.rateLimits.kvWritesPerSec}/s (burst ${a.rateLimits.kvWritesBurst}); cell ${a.rateLimits.kvCellOpsPerSec} ops/s. Grant required: ${a.requireGrant ? 'yes' : 'no'}.</p>
${a.tenants.length === 0 ? html`<p class="none">No tenants yet.</p>` : html`<table class="tenants"><thead><tr><th>tenant</th><th>grant</th><th>max rows / bytes / timers</th><th>rows</th><th>bytes</th><th>timers</th><th>measured</th><th>queues</th><th>over quota</th></tr></thead><tbody>
${a.tenants.map((t) => html`<tr class="${t.overQuota ? 'stuck' : ''}"><td class="id">${tenancy ? html`<a href="/console${query({ tenant: t.tenantId })}">${t.tenantId}</a>` : t.tenantId}</td>
<td>${t.grant ? `${t.grant.granted ? 'granted' : 'not granted'}${t.grant.enabled ? '' : ', disabled'}` : html`<span class="none">none</span>`}</td>
<td>${t.grant ? html`${limit(t.grant.maxRows)} / ${limit(t.grant.maxBytes)} / ${limit(t.grant.maxTimers)}` : ''}</td>
<td>${t.usage?.rows ?? ''}</td><td>${t.usage ? bytes(t.usage.bytes) : ''}</td><td>${t.usage?.timers ?? ''}</td><td>${t.usage?.computedAt ?? html`<span class="none">not yet</span>`}</td><td>${t.queues}</td><td>${t.overQuota ? html`<strong class="flag">over</strong>` : ''}</td></tr>`)}
</tbody></table>`}${more(a.next ? `/console/tenants${q({ ...ctx, tenant: null }, { after: a.next })}` : null)}`;
}
