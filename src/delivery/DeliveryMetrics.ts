import { Effect } from "effect"
import { Counter, Gauge, Histogram } from "prom-client"
import { ChannelType } from "../domain/Channel.js"
import { Metrics } from "../ops/Metrics.js"
import type { CircuitState } from "./CircuitBreaker.js"

/** A breaker state as a gauge value. */
const BREAKER_VALUE: Readonly<Record<CircuitState, number>> = { closed: 0, half_open: 1, open: 2, paused: 3 }

/** The statuses of stored deliveries that are counted: those with a partial index (docs/delivery/metrics.md). */
export const COUNTED_STATUSES = ["pending", "failed"] as const
export type CountedStatus = typeof COUNTED_STATUSES[number]

/** One figure of a count of stored deliveries. */
export interface StoredCount {
  readonly status: CountedStatus
  readonly channelType: string
  readonly count: number
}

/**
 * The delivery series of CONTRACT.md §9 and issue 29: attempts by outcome and channel type (`sent`,
 * `retry` — a retried failure —, `failed` — a dead letter), the latency from the append to the first
 * success, each channel's breaker state as last seen by the node running its loop, and the last count
 * of stored deliveries by status and channel type.
 */
export class DeliveryMetrics extends Effect.Service<DeliveryMetrics>()("parley/DeliveryMetrics", {
  effect: Effect.map(Metrics, ({ registry }) => {
    const attempts = new Counter({
      name: "parley_delivery_attempts_total",
      help: "Delivery attempts by channel type and outcome (sent, retry, failed: dead-lettered)",
      labelNames: ["channel_type", "outcome"] as const,
      registers: [registry]
    })
    const latency = new Histogram({
      name: "parley_delivery_latency_seconds",
      help: "From the append to the delivery's first success, by channel type",
      labelNames: ["channel_type"] as const,
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      registers: [registry]
    })
    const breakers = new Gauge({
      name: "parley_delivery_breaker_state",
      help: "Circuit breaker of each channel whose loop this node ran: 0 closed, 1 half_open, 2 open, 3 paused",
      labelNames: ["channel_id"] as const,
      registers: [registry]
    })
    const stored = new Gauge({
      name: "parley_deliveries_stored",
      help: "Deliveries stored pending (waiting to be sent) and failed (dead letters), by channel type, as last counted; " +
        "reported by one node of the cluster",
      labelNames: ["status", "channel_type"] as const,
      registers: [registry]
    })
    return {
      attempted: (channelType: string, outcome: "sent" | "retry" | "failed") => attempts.inc({ channel_type: channelType, outcome }),
      firstSuccess: (channelType: string, seconds: number) => latency.observe({ channel_type: channelType }, Math.max(0, seconds)),
      breaker: (channelId: string, state: CircuitState) => breakers.set({ channel_id: channelId }, BREAKER_VALUE[state]),
      /** The loop left this node (its entity stopped): its channel's state is reported by the next owner. */
      forgetBreaker: (channelId: string) => breakers.remove({ channel_id: channelId }),
      /** A new count: every channel type and counted status is shown, 0 where none is stored. */
      storedCounted: (counts: ReadonlyArray<StoredCount>) => {
        stored.reset()
        for (const channelType of ChannelType.literals) {
          for (const status of COUNTED_STATUSES) stored.set({ status, channel_type: channelType }, 0)
        }
        for (const { channelType, count, status } of counts) stored.set({ status, channel_type: channelType }, count)
      },
      /** Another node reports the count now (it owns the counting shard): this one shows none. */
      forgetStored: () => stored.reset()
    } as const
  })
}) {}
