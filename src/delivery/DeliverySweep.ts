import { EntityId, Sharding } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer } from "effect"
import { JobRunner } from "../ops/JobRunner.js"
import { ChannelDeliveries } from "./ChannelDeliveries.js"
import { deliverySettings } from "./DeliverySettings.js"

/** Channels woken per sweep at most; the next sweep takes the rest. */
const MAX_CHANNELS_PER_SWEEP = 10_000

/**
 * Every `DELIVERY_SWEEP_MS`, on every node, wakes the channels this node owns that have due
 * deliveries: a wake lost (a node died after its commit, a shard moved) or a retry come due is picked
 * up within one interval. Paused, inactive and inbound-only channels are left alone.
 */
export const DeliverySweepLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const settings = yield* deliverySettings
    const sql = yield* SqlClient.SqlClient
    const deliveries = yield* ChannelDeliveries
    const jobs = yield* JobRunner
    const sharding = yield* Sharding.Sharding
    const owned = (channelId: string) => sharding.hasShardId(sharding.getShardId(EntityId.make(channelId), "default"))
    yield* jobs.every(
      "sweep_due_deliveries",
      Duration.millis(settings.sweepMs),
      Effect.gen(function*() {
        // Per channel, not per delivery: each look is one probe of the `deliveries_due` index.
        const rows = yield* sql<{ id: string }>`
          SELECT c.id FROM channels c
          WHERE c.status = 'active' AND c.mode <> 'inbound' AND c.circuit_state <> 'paused'
            AND EXISTS (
              SELECT 1 FROM deliveries d
              WHERE d.channel_id = c.id AND d.status = 'pending'
                AND (d.next_attempt_at IS NULL OR d.next_attempt_at <= now()))
          LIMIT ${MAX_CHANNELS_PER_SWEEP}`
        for (const row of rows) if (owned(row.id)) yield* deliveries.wake(row.id)
      })
    )
  })
)
