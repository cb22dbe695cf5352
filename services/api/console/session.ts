// The console's sign-in: the admin token, given once on the login page, becomes a cookie the
// browser sends back only to /console (HttpOnly, SameSite=Strict). Nothing is stored on the cell:
// the cookie is an expiry and a nonce signed with a key derived from QUEEN_ADMIN_TOKEN, so every worker checks
// it alike and changing the token signs everyone out. The cookie also names the operator who signed
// in (given on the login page, OPERATOR_NAME's rule), so every action's audit line says who. Every action (a POST form) carries a CSRF
// token, an HMAC of the session cookie under the same key, checked in constant time.
import { createHmac, randomBytes } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { sameToken } from '../routes/system';
import { OPERATOR_NAME } from '../edge/audit';

export const COOKIE = 'queen_console';
/** A session lasts 12 hours, then the login page again. */
export const SESSION_SECONDS = 12 * 3600;

export class Sessions {
  private readonly key: Buffer;
  private readonly token: Buffer;

  constructor(adminToken: string, private readonly now: () => number = Date.now) {
    this.token = Buffer.from(adminToken);
    this.key = createHmac('sha256', adminToken).update('queen-console-session-v1').digest();
  }

  private mac(what: string): string {
    return createHmac('sha256', this.key).update(what).digest('base64url');
  }

  /** The token a login form gave, compared in constant time (as the system routes compare theirs). */
  tokenMatches(given: string): boolean {
    return sameToken(this.token, Buffer.from(given));
  }

  /**
   * A new session's cookie value: its expiry, a nonce of its own (so each sign-in has its own CSRF
   * token), the operator's name (base64url: a name may hold a dot), and the MAC of the three.
   */
  issue(operator: string): string {
    if (!OPERATOR_NAME.test(operator)) throw new Error('an operator name is checked before a session is issued');
    const body = `${Math.floor(this.now() / 1000) + SESSION_SECONDS}.${randomBytes(16).toString('base64url')}.${Buffer.from(operator).toString('base64url')}`;
    return `${body}.${this.mac(`session:${body}`)}`;
  }

  /** The operator a session (as `session` answered it) was signed in as. */
  operator(session: string): string {
    return Buffer.from(session.split('.')[2], 'base64url').toString();
  }

  /** The session cookie of a request when it is ours and unexpired, else null. */
  session(req: IncomingMessage): string | null {
    const value = cookie(req, COOKIE);
    if (value === null) return null;
    const m = /^((\d{1,12})\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{1,88})\.([A-Za-z0-9_-]{43})$/.exec(value);
    if (!m) return null;
    if (!equal(m[3], this.mac(`session:${m[1]}`))) return null;
    return Number(m[2]) * 1000 > this.now() ? value : null;
  }

  /** The CSRF token of a session, put in every form and checked on every POST. */
  csrf(session: string): string {
    return this.mac(`csrf:${session}`);
  }

  csrfMatches(session: string, given: unknown): boolean {
    return typeof given === 'string' && equal(given, this.csrf(session));
  }
}

function equal(a: string, b: string): boolean {
  return sameToken(Buffer.from(b), Buffer.from(a));
}

/** One cookie of the request by name (the first), or null. */
export function cookie(req: IncomingMessage, name: string): string | null {
  const header = req.headers.cookie;
  if (typeof header !== 'string') return null;
  for (const part of header.split(';')) {
    const at = part.indexOf('=');
    if (at < 0) continue;
    if (part.slice(0, at).trim() === name) return part.slice(at + 1).trim();
  }
  return null;
}

/** The Set-Cookie of a session (or, with null, the one that ends it). Secure when the request came over TLS. */
export function setCookie(value: string | null, secure: boolean): string {
  const attrs = `Path=/console; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`;
  return value === null ? `${COOKIE}=; ${attrs}; Max-Age=0` : `${COOKIE}=${value}; ${attrs}; Max-Age=${SESSION_SECONDS}`;
}
