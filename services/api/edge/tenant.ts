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
