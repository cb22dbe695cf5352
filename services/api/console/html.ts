// The console's HTML: one escaping template tag and the page frame. Every interpolated value is
// escaped unless it is itself the output of `html` (a Safe), so a payload, a key or a queue name
// holding `<script>` renders as text. No framework, no build step: the strings are the page.
import type { ServerResponse } from 'node:http';

/** Text already rendered by `html`: interpolated as is. */
export class Safe {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escape(value: unknown): string {
  return String(value ?? '').replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

function piece(value: unknown): string {
  if (value instanceof Safe) return value.text;
  if (Array.isArray(value)) return value.map(piece).join('');
  if (value === null || value === undefined || value === false) return '';
  return escape(value);
}

/** The one way to write markup: `html\`<td>${name}</td>\``; arrays are joined, null/false vanish. */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Safe {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += piece(values[i]) + strings[i + 1];
  return new Safe(out);
}

/** A path segment: percent-encoded (the value is then escaped again where it lands in an attribute). */
export const seg = (s: string): string => encodeURIComponent(s);

/** A query string from the defined entries, `?a=1&b=2` (empty when there are none). */
export function query(entries: Record<string, string | number | null | undefined>): string {
  const parts = Object.entries(entries).filter(([, v]) => v !== undefined && v !== null && v !== '')
    .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`);
  return parts.length ? `?${parts.join('&')}` : '';
}

/**
 * The headers of every console answer: nothing from elsewhere (no inline script or style, no
 * frame, no form posted off the cell), no sniffing, nothing kept by a cache.
 */
export const CSP = "default-src 'none'; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

export function securityHeaders(res: ServerResponse): void {
  res.setHeader('Content-Security-Policy', CSP);
  res.setHeader('X-Content-Type-Options', 'nosniff');
  res.setHeader('Cache-Control', 'no-store');
  res.setHeader('X-Frame-Options', 'DENY');
  res.setHeader('Referrer-Policy', 'no-referrer');
}

export interface Frame {
  title: string;
  /** The tenant the pages look at (null: no tenant chosen, or a cell without tenancy). */
  tenant: string | null;
  tenancy: boolean;
  /** Signed in: show the navigation and the sign-out form. */
  csrf?: string;
  /** Who is signed in (shown beside Sign out). */
  operator?: string;
  notice?: string | null;
}

export function page(frame: Frame, body: Safe): Safe {
  const t = frame.tenancy ? frame.tenant : null;
  const q = query({ tenant: t });
  const nav = frame.csrf === undefined ? '' : html`<nav>
  <a href="/console${q}">Overview</a>
  ${frame.tenancy && t === null ? '' : html`<a href="/console/timers${q}">Timers</a> <a href="/console/kv${q}">KV</a>`}
  <a href="/console/tenants${q}">Tenants</a>
  ${frame.tenancy ? html`<span class="tenant">tenant: ${t ?? 'none chosen'}</span>` : ''}
  ${frame.operator ? html`<span class="who">signed in as ${frame.operator}</span>` : ''}
  <form method="post" action="/console/logout" class="inline"><input type="hidden" name="csrf" value="${frame.csrf}"><button type="submit">Sign out</button></form>
</nav>`;
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${frame.title} · Queen KV console</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/console/console.css"></head>
<body><header><h1>Queen KV console</h1>${nav}</header>
<main><h2>${frame.title}</h2>${frame.notice ? html`<p class="notice" role="status">${frame.notice}</p>` : ''}${body}</main></body></html>
`;
}

export function send(res: ServerResponse, status: number, body: Safe): void {
  securityHeaders(res);
  const text = body.text;
  res.writeHead(status, { 'Content-Type': 'text/html; charset=utf-8', 'Content-Length': Buffer.byteLength(text) });
  res.end(text);
}

/** A number of bytes for people: 1.2 KiB. */
export function bytes(n: unknown): string {
  const v = Number(n ?? 0);
  if (v < 1024) return `${v} B`;
  if (v < 1024 * 1024) return `${(v / 1024).toFixed(1)} KiB`;
  if (v < 1024 ** 3) return `${(v / 1024 / 1024).toFixed(1)} MiB`;
  return `${(v / 1024 ** 3).toFixed(1)} GiB`;
}

/** Seconds for people: 3m 20s. */
export function age(seconds: unknown): string {
  if (seconds === null || seconds === undefined) return '';
  const s = Math.floor(Number(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}
