// Reading a request body: raw text (numbers travel as the client wrote them), UTF-8 only, JSON
// that PostgreSQL's jsonb can store.
import type { RequestHandler } from 'express';
import express from 'express';
import { isUtf8 } from 'node:buffer';
import type { IncomingMessage } from 'node:http';
import { ApiError } from '../../../shared/errors';
import type { Config } from '../../../shared/config';

/** The raw body as text: numbers must reach PostgreSQL exactly as the client wrote them. */
export function rawBody(config: Config): RequestHandler {
  return express.text({ type: () => true, limit: config.maxBodyBytes, defaultCharset: 'utf-8', verify: refuseInvalidUtf8 });
}

/**
 * JSON text is UTF-8 (RFC 8259). A body read as UTF-8 that is not (Latin-1 bytes sent without a
 * charset, say) was decoded with U+FFFD in place of each bad byte and stored so: "café" became
 * "caf\uFFFD", silently, in values and in keys. It is refused instead (errorHandler: invalid_json).
 * A body that declares another charset is decoded from it, as before.
 */
function refuseInvalidUtf8(_req: unknown, _res: unknown, body: Buffer, encoding: string): void {
  if (/^utf-?8$/i.test(encoding) && !isUtf8(body)) {
    throw Object.assign(new Error('The request body is not valid UTF-8.'), { type: INVALID_UTF8 });
  }
}


export const INVALID_UTF8 = 'entity.invalid_utf8';

export function bodyText(req: IncomingMessage & { body?: unknown }): string {
  return typeof req.body === 'string' ? req.body : '';
}

/**
 * JSON.parse for validation and routing only; the text itself is what travels on.
 * `storable: false` leaves refuseUnstorable to a caller that first gives a U+0000 in a key or
 * namespace its field's code (refuseNulKeys), and calls it after.
 */
export function parseJson(text: string, storable = true): unknown {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new ApiError('invalid_json', 'The request body is not valid JSON.');
  }
  if (storable) refuseUnstorable(text);
  return parsed;
}

/**
 * JSON that JavaScript parses and PostgreSQL's jsonb refuses: an escaped U+0000 (text cannot hold
 * it) or a lone surrogate escape (\uD800-\uDFFF without its pair). Refused here, before SQL:
 * PostgreSQL logs its refusal with a CONTEXT line quoting the body up to the escape ("JSON data,
 * line 1: ...\"value\":\"..."), a stored value or a payload in the server's log (2026-12-01). Only
 * a body holding `\u` is scanned; each match is one escape, so `\\u0000` (a backslash, then the
 * text u0000) is not one.
 */
export function refuseUnstorable(text: string): void {
  if (!text.includes('\\u')) return;
  const escape = /\\(?:u([0-9a-fA-F]{4})|[^u])/g;
  const lone = () => new ApiError('invalid_json', 'The request body holds a lone surrogate escape (\\uD800 to \\uDFFF without its pair), which PostgreSQL cannot store.');
  let highEnd = -1; // where a high surrogate escape ended, waiting for its low half right there
  for (let m = escape.exec(text); m; m = escape.exec(text)) {
    const code = m[1] === undefined ? -1 : parseInt(m[1], 16);
    const low = code >= 0xdc00 && code <= 0xdfff;
    if (highEnd >= 0 ? !(low && m.index === highEnd) : low) throw lone();
    if (code === 0) throw new ApiError('invalid_json', 'The request body holds U+0000 (\\u0000) in a string, which PostgreSQL text cannot store.');
    highEnd = code >= 0xd800 && code <= 0xdbff ? escape.lastIndex : -1;
  }
  if (highEnd >= 0) throw lone();
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** parseJson for a body that must be one JSON object (every body-taking route's first rule). */
export function parseObject(text: string, storable = true): Record<string, unknown> {
  const parsed = parseJson(text, storable);
  if (!isPlainObject(parsed)) throw new ApiError('invalid_json', 'The request body must be a JSON object.');
  return parsed;
}
