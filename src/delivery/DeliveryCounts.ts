import { EntityId, Sharding } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer, Schema } from "effect"
import { JobRunner } from "../ops/JobRunner.js"
import { COUNTED_STATUSES, DeliveryMetrics } from "./DeliveryMetrics.js"
import { deliverySettings } from "./DeliverySettings.js"

/** The counts are reported by the node owning this key's shard: one figure for the cluster, not one per node. */
const REPORTER = EntityId.make("parley/stored-deliveries")

const CountRows = Schema.Array(Schema.Struct({
  channel_type: Schema.String,
  status: Schema.Literal(...COUNTED_STATUSES),
  // sum() of counts is numeric: sent as text.
  count: Schema.NumberFromString
}))
const decodeCounts = Schema.decodeUnknown(CountRows)

/**
 * Every `DELIVERY_COUNT_MS`, the node that owns the reporter's shard counts the stored deliveries that
 * wait (`pending`) and the dead letters (`failed`) by channel type for `parley_deliveries_stored`; a
 * scrape reads the last count. Each status is read from its partial index (`deliveries_due`,
 * `deliveries_failed`): the work grows with the backlog, never with the sent rows of the whole table.
 */
export const DeliveryCountsLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const settings = yield* deliverySettings
    const sql = yield* SqlClient.SqlClient
    const metrics = yield* DeliveryMetrics
    const jobs = yield* JobRunner
    const sharding = yield* Sharding.Sharding
    yield* jobs.every(
      "count_stored_deliveries",
      Duration.millis(settings.countMs),
      Effect.gen(function*() {
        if (!sharding.hasShardId(sharding.getShardId(REPORTER, "default"))) return metrics.forgetStored()
        // Counted per channel first (index-only over the partial indexes), then joined to its few channels.
        const rows = yield* sql`
          SELECT c.type AS channel_type, d.status, sum(d.n)::text AS count
          FROM (
            SELECT channel_id, 'pending' AS status, count(*) AS n FROM deliveries WHERE status = 'pending' GROUP BY channel_id
            UNION ALL
            SELECT channel_id, 'failed' AS status, count(*) AS n FROM deliveries WHERE status = 'failed' GROUP BY channel_id
          ) d
          JOIN channels c ON c.id = d.channel_id
          GROUP BY c.type, d.status`.pipe(Effect.flatMap(decodeCounts))
        metrics.storedCounted(rows.map((row) => ({ status: row.status, channelType: row.channel_type, count: row.count })))
      })
    )
  })
)
