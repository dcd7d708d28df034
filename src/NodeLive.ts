import { Effect, Layer, Logger, LogLevel } from "effect"
import { ChannelDeliveriesLive } from "../cluster/ChannelDeliveriesLive.js"
import { ChannelEntityLive } from "../cluster/ChannelEntityLive.js"
import { ChannelFeedLive } from "../cluster/ChannelFeedLive.js"
import { ClusterLive } from "../cluster/ClusterLive.js"
import { ConversationEntityLive } from "../cluster/ConversationEntityLive.js"
import { ConversationExpiryLive } from "../cluster/ConversationExpiry.js"
import { ConversationOwnersLive } from "../cluster/ConversationOwnersLive.js"
import { ConversationSignalsEntityLive } from "../cluster/ConversationSignalsEntityLive.js"
import { ConversationSignalsLive } from "../cluster/ConversationSignalsLive.js"
import { ChannelSecrets } from "./channels/ChannelSecrets.js"
import { AppConfig } from "./config/AppConfig.js"
import { ActivityRepo } from "./conversations/ActivityRepo.js"
import { ActivityWriter } from "./conversations/ActivityWriter.js"
import { ConversationCores } from "./conversations/ConversationCores.js"
import { ConversationPurge, ConversationPurgeLive } from "./conversations/ConversationPurge.js"
import { ConversationStateRepo } from "./conversations/ConversationState.js"
import { Conversations } from "./conversations/Conversations.js"
import { AddressGuard } from "./delivery/AddressGuard.js"
import { DeliveryCountsLive } from "./delivery/DeliveryCounts.js"
import { DeliveryMetrics } from "./delivery/DeliveryMetrics.js"
import { DeliverySendersLive } from "./delivery/DeliverySenders.js"
import { DeliverySweepLive } from "./delivery/DeliverySweep.js"
import { LocalChannelFeeds } from "./delivery/LocalChannelFeeds.js"
import { RateLimiter } from "./ratelimit/RateLimiter.js"
import { RoutingRules } from "./routing/RoutingRules.js"
import { ConversationHub } from "./realtime/ConversationHub.js"
import { ReadPositions } from "./conversations/ReadPositions.js"
import { CountersClientLive } from "./db/CountersClient.js"
import { DatabaseLive } from "./db/Database.js"
import { MigrationsLive } from "./db/Migrations.js"
import { WriterClientLive } from "./db/WriterClient.js"
import { HttpLive } from "./http/HttpLive.js"
import { HousekeepingLive } from "./ops/Housekeeping.js"
import { JobRunner } from "./ops/JobRunner.js"
import { Lifecycle } from "./ops/Lifecycle.js"
import { Metrics } from "./ops/Metrics.js"
import { NodeMetricsLive } from "./ops/NodeMetrics.js"

/** Structured logs at `LOG_LEVEL`, one JSON object a line unless `LOG_FORMAT=pretty`. */
export const LoggingLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    Layer.mergeAll(
      config.logFormat === "json" ? Logger.json : Logger.pretty,
      Logger.minimumLogLevel(
        config.logLevel === "none" ? LogLevel.None : LogLevel.fromLiteral(
          config.logLevel === "warning" ? "Warning" : (config.logLevel[0]!.toUpperCase() + config.logLevel.slice(1)) as LogLevel.Literal
        )
      )
    ))
)

const NodeServices = Layer.mergeAll(Metrics.Default, Lifecycle.Default, JobRunner.Default)

/**
/**
 * Each channel's delivery loop (its entity, with the senders by channel type), the sweep that wakes lost
 * ones, and the count of stored deliveries for `/metrics`. The entities and their `websocket` sender
 * share one set of local feeds.
 */
const DeliveryLive = Layer.mergeAll(
  ChannelEntityLive.pipe(
    Layer.provide(DeliverySendersLive),
    Layer.provide(ChannelSecrets.Default),
    Layer.provide(Conversations.Default),
    Layer.provide(LocalChannelFeeds.Default)
  ),
  DeliverySweepLive,
  DeliveryCountsLive
).pipe(Layer.provide(DeliveryMetrics.Default))

/**
 * A whole node. Each `provide` builds its layer first and releases it last, which is the drain order:
 * routes, entities, writer, sharding, pool.
 */
export const NodeLive = HttpLive.pipe(
  Layer.provide(
    Layer.mergeAll(
      ConversationEntityLive,
      ConversationSignalsEntityLive,
      ConversationExpiryLive,
      ConversationPurgeLive,
      HousekeepingLive,
      NodeMetricsLive,
      DeliveryLive
    )
  ),
  // Merged into the output, so in-process test nodes can reach the hub and the limiter.
  Layer.provideMerge(Layer.mergeAll(ConversationHub.Default, RateLimiter.Default, ConversationCores.Default(), ConversationSignalsLive, ChannelFeedLive)),
  Layer.provideMerge(
    Layer.mergeAll(
      ActivityWriter.Default,
      ActivityRepo.Default,
      ConversationStateRepo.Default,
      ConversationPurge.Default,
      ReadPositions.Default,
      ConversationOwnersLive,
      ChannelDeliveriesLive,
      // Appends plan from its cache; the routes use the same instance.
      RoutingRules.Default,
      // One guard for the senders' sends and the routes' config checks.
      AddressGuard.Default
    )
  ),
  // Built before the writer and released after it.
  Layer.provide(WriterClientLive),
  Layer.provideMerge(ClusterLive),
  // Built before the limiter and released after it.
  Layer.provide(CountersClientLive),
  // Merged into the output, so in-process test nodes can start a drain.
  Layer.provideMerge(NodeServices),
  Layer.provide(MigrationsLive),
  // Merged into the output too: in-process test nodes read their own database through it.
  Layer.provideMerge(DatabaseLive)
)
