// The audit line of an operator's action (an operator route, a kill switch): who, from where, on
// what, and its outcome; never a value or a payload. Who is what the operator's tooling sends in
// x-queen-operator, when it is a plain name; anything else is null, never echoed. The web console
// names the operator its session was signed in as (services/api/console/session.ts) instead.
import type { IncomingMessage } from 'node:http';
import type { Logger } from '../../../shared/log';

/** An operator's name: what x-queen-operator and the console's sign-in accept. */
export const OPERATOR_NAME = /^[A-Za-z0-9._@:+-]{1,64}$/;

export function audit(log: Logger, req: IncomingMessage, action: string, fields: { tenant?: string | null; target: Record<string, unknown>; outcome: unknown; reason?: string; operator?: string }): void {
  const named = fields.operator ?? req.headers['x-queen-operator'];
  const operator = typeof named === 'string' && OPERATOR_NAME.test(named) ? named : null;
  log.info({ audit: { action, tenant: fields.tenant ?? null, operator, remote: req.socket.remoteAddress ?? null, target: fields.target, outcome: fields.outcome, ...(fields.reason !== undefined ? { reason: fields.reason } : {}) } }, 'operator action');
}
