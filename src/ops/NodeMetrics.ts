import { Sharding, ShardId } from "@effect/cluster"
import { Effect, Layer, Runtime } from "effect"
import { ConversationCores } from "../conversations/ConversationCores.js"
import { DatabasePool } from "../db/Database.js"
import { POOL_WAIT_WINDOW_MS } from "../db/MeasuredPool.js"
import { Lifecycle } from "./Lifecycle.js"
import { Metrics } from "./Metrics.js"

/** Shards of the default group (the cluster's `shardsPerGroup` default, which Parley keeps). */
const SHARDS = 300

/** Database pool figures, drain state and this node's share of the cluster, read at every scrape. */
export const NodeMetricsLive = Layer.effectDiscard(
  Effect.gen(function*() {
    const metrics = yield* Metrics
    const { pool } = yield* DatabasePool
    const lifecycle = yield* Lifecycle
    const sharding = yield* Sharding.Sharding
    const cores = yield* ConversationCores
    const runtime = yield* Effect.runtime<never>()
    let draining = false
    yield* Effect.forkDaemon(lifecycle.awaitDrain.pipe(Effect.tap(() => Effect.sync(() => (draining = true)))))
    metrics.gauge("parley_db_pool_connections", "Open connections of the database pool", () => pool.totalCount)
    metrics.gauge("parley_db_pool_idle_connections", "Idle connections of the database pool", () => pool.idleCount)
    metrics.gauge("parley_db_pool_waiting_requests", "Requests waiting for a pool connection", () => pool.waitingCount)
    metrics.gauge(
      "parley_db_pool_wait_seconds_avg",
      `Average pool checkout wait over the last ${POOL_WAIT_WINDOW_MS / 1000} s`,
      () => pool.averageWaitMs(POOL_WAIT_WINDOW_MS) / 1000
    )
    metrics.gauge("parley_draining", "1 while the node drains", () => (draining ? 1 : 0))
    metrics.gauge("parley_cluster_shards_owned", "Shards this node owns", () => {
      let owned = 0
      for (let shard = 1; shard <= SHARDS; shard++) if (sharding.hasShardId(ShardId.make("default", shard))) owned++
      return owned
    })
    metrics.gauge(
      "parley_cluster_entities_active",
      "Entities running on this node",
      () => Runtime.runSync(runtime)(sharding.activeEntityCount)
    )
    metrics.gauge("parley_conversations_running", "Conversations whose logic runs on this node", cores.running)
    metrics.gauge("parley_conversation_streams", "Live streams open on this node's conversations, for listeners on any node", cores.streams)
  })
)
