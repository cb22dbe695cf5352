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

/**
 * How a sealed message's `data` appears in a pop's or dead-letter read's jsonb text: jsonb orders
 * an object's keys by length, so the message's `data` is followed by its `queue` (a name, no quote
 * in it) and then by its own "sealed" mark. Only a payload so marked is opened: a message in clear
 * whose payload merely looks sealed (a timer's, scheduled before its queue turned encrypted) beside
 * a sealed one in the same answer is left as it is.
 */
const SEALED_DATA = /"data": "(qk1:[0-9a-f]{8}:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]*)", ("queue": "[A-Za-z0-9_.:-]+", "sealed": true)/g;

/**
 * A pop's (or dead-letter read's) answer text with every sealed payload opened in place, the rest
 * untouched (no other value is re-serialised). Only answers holding a message marked
 * `"sealed": true` are looked at. A payload no key here opens is answered as `data: null` with
 * `"sealedUnreadable": true`, and `onUnreadable` hears how many (never what).
 */
export function openAnswer(keys: EncryptionKeys | undefined, text: string, onUnreadable: (n: number) => void = () => undefined): string {
  if (!text.includes('"sealed": true')) return text;
  let unreadable = 0;
  const opened = text.replace(SEALED_DATA, (_match, sealed: string, rest: string) => {
    const plain = open(keys, sealed);
    if (plain !== undefined) return `"data": ${plain}, ${rest}`;
    unreadable++;
    return `"data": null, ${rest}, "sealedUnreadable": true`;
  });
  if (unreadable > 0) onUnreadable(unreadable);
  return opened;
}

/**
 * How a sealed timer's payload appears in a peek's or list's jsonb text: jsonb orders an object's
 * keys by length, so the timer's own "sealed" mark is followed at once by its "payload".
 */
const SEALED_TIMER = /"sealed": true, "payload": "(qk1:[0-9a-f]{8}:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]*)"/g;

/**
 * A timer peek's or list's answer text with every sealed timer's payload opened in place, as
 * openAnswer does for messages: one no key here opens is answered `payload: null` with
 * `"sealedUnreadable": true`, and `onUnreadable` hears how many (never what).
 */
export function openTimers(keys: EncryptionKeys | undefined, text: string, onUnreadable: (n: number) => void = () => undefined): string {
  if (!text.includes('"sealed": true')) return text;
  let unreadable = 0;
  const opened = text.replace(SEALED_TIMER, (_match, sealed: string) => {
    const plain = open(keys, sealed);
    if (plain !== undefined) return `"sealed": true, "payload": ${plain}`;
    unreadable++;
    return '"sealed": true, "payload": null, "sealedUnreadable": true';
  });
  if (unreadable > 0) onUnreadable(unreadable);
  return opened;
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
