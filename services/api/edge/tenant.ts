// The tenant a data request acts for.
import type { IncomingMessage } from 'node:http';
import { ApiError } from '../../../shared/errors';
import { isUuid } from '../../../shared/uuid';
import { DEFAULT_TENANT, Config } from '../../../shared/config';

/** Never a tenant under tenancy: the nil UUID (no one), and the default tenant (the cell's own, tenancy off). */
const NIL_TENANT = '00000000-0000-0000-0000-000000000000';

/**
 * The tenant of a data request (the log, the transaction wire, KV, timers). Under tenancy every one
 * of them names it in x-queen-tenant, and everything it reaches is that tenant's alone; the default
 * tenant, which owns every row written with tenancy off, is reachable only with tenancy off.
 */
export function tenantOf(config: Config, req: IncomingMessage): string {
  if (!config.tenancyHeader) return DEFAULT_TENANT;
  const header = req.headers['x-queen-tenant'];
  if (typeof header !== 'string' || !isUuid(header.trim())) {
    throw new ApiError('tenant_required', 'This cell takes the tenant from the x-queen-tenant header, a UUID.');
  }
  const tenant = header.trim().toLowerCase();
  if (tenant === NIL_TENANT || tenant === DEFAULT_TENANT) {
    throw new ApiError(
      'tenant_required',
      `x-queen-tenant ${tenant} is not a tenant: the nil UUID names no one, and ${DEFAULT_TENANT} is the cell's default tenant, reachable only with tenancy off.`,
    );
  }
  return tenant;
}

/** The answer to a data call of a tenant in a move (and to a long-poll pop that was waiting when it began). */
export function movingRefusal(role: 'source' | 'target' | 'moved'): ApiError {
  const message =
    role === 'moved'
      ? 'This tenant has moved to another cell; the router sends its calls there. Nothing was read or written here; retry.'
      : 'This tenant is moving to another cell; its calls are refused for the few seconds the move takes. Nothing was read or written; retry.';
  return new ApiError('tenant_moving', message, { retryAfterSeconds: 1 });
}
