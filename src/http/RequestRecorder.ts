import { Effect } from "effect"
import { logsAtDebug } from "../ops/LogLevels.js"
import { Metrics } from "../ops/Metrics.js"

type RecordRequest = (requestId: string, method: string, route: string, status: number, started: number) => Effect.Effect<void>

/**
 * Records every answered request, on either way in: count and duration under its route template when
 * called, and the access log line the returned effect writes at debug.
 */
export const requestRecorder: Effect.Effect<RecordRequest, never, Metrics> = Effect.map(
  Effect.zip(Metrics, logsAtDebug),
  ([metrics, accessLog]) => (requestId, method, route, status, started) => {
    const seconds = (performance.now() - started) / 1000
    metrics.observeRequest(route, method, status, seconds)
    return accessLog
      ? Effect.logDebug("http request").pipe(Effect.annotateLogs({
        request_id: requestId,
        method,
        route,
        status,
        duration_ms: Math.round(seconds * 1000)
      }))
      : Effect.void
  }
)
