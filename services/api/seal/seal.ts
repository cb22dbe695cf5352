// Encryption at rest of the payloads of queues configured with encryptionEnabled (Queen's option;
// docs/security.md#encryption-at-rest). The API seals and opens; PostgreSQL only ever holds the
// sealed text, and knows which messages are sealed (queen.sealed_messages) and which queues must be
// (queen.queue_options), never the key.
//
// A sealed payload is stored as a JSON string:
//   qk1:<key id>:<iv>:<tag>:<ciphertext>
// AES-256-GCM with a fresh 96-bit IV per payload, the 128-bit tag, base64 parts; the plaintext is the
// payload's JSON text as PostgreSQL renders it (jsonb: numbers exact). The key id is 8 hex digits of a
// SHA-256 of the key, so a payload sealed before a rotation opens with QUEEN_ENCRYPTION_KEY_PREVIOUS.
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { EncryptionKeys } from '../../../shared/config';
import { ApiError, SQLSTATE } from '../../../shared/errors';

const PREFIX = 'qk1';

/** A key's id in the sealed text: names which key sealed it, tells nothing about the key. */
export function keyId(key: Buffer): string {
  return createHash('sha256').update('queen-kv sealing key id\u0000').update(key).digest('hex').slice(0, 8);
}

/** The sealed text of a payload's JSON text. */
export function seal(keys: EncryptionKeys, plaintext: string): string {
  const key = keys.current();
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
  return [PREFIX, keyId(key), iv.toString('base64'), cipher.getAuthTag().toString('base64'), ciphertext.toString('base64')].join(':');
}

/** The JSON text sealed in `sealed`, or undefined when no key held here opens it (or it was altered). */
export function open(keys: EncryptionKeys | undefined, sealed: string): string | undefined {
  const parts = sealed.split(':');
  if (!keys || parts.length !== 5 || parts[0] !== PREFIX) return undefined;
  const key = keys.all().find((k) => keyId(k) === parts[1]);
  if (!key) return undefined;
  try {
    const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(parts[2], 'base64'));
    decipher.setAuthTag(Buffer.from(parts[3], 'base64'));
    return Buffer.concat([decipher.update(Buffer.from(parts[4], 'base64')), decipher.final()]).toString('utf8');
  } catch {
    return undefined;
  }
}

/** A sealed text, as it stands in a jsonb string. */
const SEALED_TEXT = /"(qk1:[0-9a-f]{8}:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]*)"/y;
const MARK = '"sealed": true';

/**
 * Where the string values of `key` start in a JSON text (the index of their opening quote),
 * leaving out any inside another value of `key`: a payload is a client's JSON, and an object in
 * it that mimics a sealed message (`{"data": "qk1:...", "sealed": true}`) must stay the client's
 * text, never be opened with the cell's key.
 */
function stringValuesOf(text: string, key: string): number[] {
  const found: number[] = [];
  // Per open container: whether it lies inside a value of `key`.
  const within: boolean[] = [];
  let keyOfNext: string | undefined;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      const start = i;
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === '\\') i++;
      let j = i + 1;
      while (text[j] === ' ') j++;
      if (text[j] === ':') {
        keyOfNext = text.slice(start + 1, i);
        i = j;
        continue;
      }
      if (keyOfNext === key && !within[within.length - 1]) found.push(start);
      keyOfNext = undefined;
    } else if (c === '{' || c === '[') {
      within.push((within[within.length - 1] ?? false) || keyOfNext === key);
      keyOfNext = undefined;
    } else if (c === '}' || c === ']') {
      within.pop();
    } else if (c !== ' ' && c !== ',' && c !== '\n') {
      keyOfNext = undefined; // a number, true, false or null
      while (i + 1 < text.length && !',}] \n'.includes(text[i + 1])) i++;
    }
  }
  return found;
}

/** Whether the object whose value ends at `from` carries `"sealed": true` later at its own level. */
function markedAfter(text: string, from: number): boolean {
  let depth = 0;
  for (let i = from; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      if (depth === 0 && text.startsWith(MARK, i)) return true;
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === '\\') i++;
    } else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      if (depth === 0) return false;
      depth--;
    }
  }
  return false;
}

/**
 * `text` with the sealed string values of `key` opened in place, the rest untouched (no other
 * value is re-serialised). `marked(end, start)` says whether the value's own object marks it
 * sealed; a value no key here opens becomes `null`, followed by `"sealedUnreadable": true`.
 */
function openValues(keys: EncryptionKeys | undefined, text: string, key: string, marked: (start: number, end: number) => boolean, onUnreadable: (n: number) => void): string {
  if (!text.includes(MARK)) return text;
  let out = '';
  let last = 0;
  let unreadable = 0;
  for (const start of stringValuesOf(text, key)) {
    SEALED_TEXT.lastIndex = start;
    const m = SEALED_TEXT.exec(text);
    if (!m) continue;
    const end = start + m[0].length;
    if (!marked(start, end)) continue;
    const plain = open(keys, m[1]);
    out += text.slice(last, start) + (plain ?? 'null, "sealedUnreadable": true');
    if (plain === undefined) unreadable++;
    last = end;
  }
  if (unreadable > 0) onUnreadable(unreadable);
  return last === 0 ? text : out + text.slice(last);
}

/**
 * An answer's text (a pop, a dead-letter read, an operator's message read) with every sealed
 * message payload opened. jsonb writes an object's keys by length, so a message's own "sealed"
 * mark comes after its "data": only a payload so marked is opened, so a message in clear whose
 * payload merely looks sealed (a timer's, scheduled before its queue turned encrypted) beside a
 * sealed one stays as it is. A payload no key here opens is answered as `data: null` with
 * `"sealedUnreadable": true`, and `onUnreadable` hears how many (never what).
 */
export function openAnswer(keys: EncryptionKeys | undefined, text: string, onUnreadable: (n: number) => void = () => undefined): string {
  return openValues(keys, text, 'data', (_start, end) => markedAfter(text, end), onUnreadable);
}

/**
 * A timer peek's or list's answer text with every sealed timer's payload opened, as openAnswer
 * does for messages. jsonb puts the timer's "sealed" mark (6 letters) right before its
 * "payload" (7).
 */
export function openTimers(keys: EncryptionKeys | undefined, text: string, onUnreadable: (n: number) => void = () => undefined): string {
  const before = `${MARK}, "payload": `;
  return openValues(keys, text, 'payload', (start) => text.startsWith(before, start - before.length), onUnreadable);
}

/**
 * The encrypted queues a push or a timer schedule named when PostgreSQL asked for its payloads
 * sealed (QK428), or undefined for any other error. Without a key here (a process started without it while another
 * configured the queue), the push is refused as configure refuses.
 */
export function sealingRequired(err: unknown, keys: EncryptionKeys | undefined): string[] | undefined {
  const e = err as { code?: string; detail?: string };
  if (e?.code !== SQLSTATE.QUEEN_SEALING_REQUIRED) return undefined;
  if (!keys) throw new ApiError('log_encryption_unavailable', 'The queue is encrypted and this API process has no QUEEN_ENCRYPTION_KEY; an operator sets it on every API process.');
  const queues = (JSON.parse(e.detail ?? '{}') as { queues?: unknown }).queues;
  return Array.isArray(queues) ? queues.map(String) : [];
}

/** Each payload text sealed, aligned with the items (null where there was none to seal), as JSON text. */
export function sealAll(keys: EncryptionKeys, texts: Array<string | null>): string {
  return JSON.stringify(texts.map((t) => (t === null ? null : seal(keys, t))));
}
