import { Effect, FiberRef, LogLevel } from "effect"

/**
 * Whether debug lines are written at the level the node runs with (`LOG_LEVEL`, fixed at start).
 * Read once where a debug line is on every request: building a line and its annotations costs about
 * a tenth of an append's instructions even when the level then drops it.
 */
export const logsAtDebug = Effect.map(
  FiberRef.get(FiberRef.currentMinimumLogLevel),
  (minimum) => LogLevel.lessThanEqual(minimum, LogLevel.Debug)
)
