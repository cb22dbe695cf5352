// The duration metric of the log's routes and the transaction wire (queen_log_request_duration_seconds).
import type { ApiMetrics, LogRoute } from '../../../shared/metrics';

/**
 * A handler whose time, from routing to the answer (a refusal included), goes to
 * queen_log_request_duration_seconds under the route `routeOf` names once it is done.
 */
export function timed<Req, Res>(
  metrics: ApiMetrics,
  routeOf: LogRoute | ((req: Req) => LogRoute),
  handler: (req: Req, res: Res) => Promise<void>,
): (req: Req, res: Res) => Promise<void> {
  return async (req, res) => {
    const stop = metrics.logDuration.startTimer();
    try {
      await handler(req, res);
    } finally {
      stop({ route: typeof routeOf === 'string' ? routeOf : routeOf(req) });
    }
  };
}
