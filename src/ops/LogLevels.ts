import { Effect, FiberRef, LogLevel } from "effect"

/**
 * Whether debug lines are written at the level the node runs with (`LOG_LEVEL`, fixed at start): a
 * debug line on every request is built only when it will be written (ADR 0006).
 */
export const logsAtDebug = Effect.map(
  FiberRef.get(FiberRef.currentMinimumLogLevel),
  (minimum) => LogLevel.lessThanEqual(minimum, LogLevel.Debug)
)
