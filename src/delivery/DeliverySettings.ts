import { Config, type ConfigError, Effect } from "effect"
import type { BreakerSettings } from "./CircuitBreaker.js"

/** How each channel's delivery loop, the sweep behind it and the count of stored deliveries run (docs/delivery/). */
export interface DeliverySettings {
  readonly batchSize: number
  readonly concurrency: number
  readonly sweepMs: number
  /** How often the stored deliveries are counted for `/metrics` (docs/delivery/metrics.md). */
  readonly countMs: number
  readonly breaker: BreakerSettings
}

const bounded = (config: Config.Config<number>, fallback: number, min: number, max: number) =>
  config.pipe(
    Config.withDefault(fallback),
    Config.validate({ message: `must be an integer from ${min} to ${max}`, validation: (n) => n >= min && n <= max })
  )

export const deliverySettings: Effect.Effect<DeliverySettings, ConfigError.ConfigError> = Effect.gen(function*() {
  return {
    batchSize: yield* bounded(Config.integer("DELIVERY_BATCH_SIZE"), 50, 1, 1000),
    concurrency: yield* bounded(Config.integer("DELIVERY_CONCURRENCY"), 8, 1, 256),
    sweepMs: yield* bounded(Config.integer("DELIVERY_SWEEP_MS"), 30_000, 100, 3_600_000),
    countMs: yield* bounded(Config.integer("DELIVERY_COUNT_MS"), 60_000, 1000, 3_600_000),
    breaker: {
      failureThreshold: yield* bounded(Config.integer("DELIVERY_BREAKER_FAILURES"), 5, 1, 1000),
      coolDownMs: yield* bounded(Config.integer("DELIVERY_BREAKER_COOLDOWN_MS"), 30_000, 10, 86_400_000)
    }
  }
})
