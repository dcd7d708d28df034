import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import { NodeHttpServer } from "@effect/platform-node"
import { Duration, Effect, Layer } from "effect"
import { Channels } from "../channels/Channels.js"
import { PublishableKeys } from "../channels/PublishableKeys.js"
import { AppConfig } from "../config/AppConfig.js"
import { ChannelTokens } from "../auth/ChannelTokens.js"
import { ClientTokens } from "../auth/ClientTokens.js"
import { TokenRevocations } from "../auth/TokenRevocations.js"
import { TokenSigner } from "../auth/TokenSigner.js"
import { Conversations } from "../conversations/Conversations.js"
import { ChannelDelivery } from "../delivery/ChannelDelivery.js"
import { Deliveries } from "../delivery/Deliveries.js"
import { Outbox } from "../delivery/Outbox.js"
import { Lifecycle } from "../ops/Lifecycle.js"
import { OpsRoutes, opsRoutes } from "../ops/OpsRoutes.js"
import { Readiness } from "../ops/Readiness.js"
import { ApiKeys } from "../tenants/ApiKeys.js"
import { PortalUsers } from "../tenants/PortalUsers.js"
import { Tenants } from "../tenants/Tenants.js"
import { AppendRoute, LeanAppendRoute } from "./AppendRoute.js"
import { AdminAuthLive } from "./AdminAuth.js"
import { AdminHandlers } from "./AdminHandlers.js"
import { ManageAuthLive, TenantAuthLive, TenantKeyAuthLive } from "./TenantAuth.js"
import { ConversationListHandlers, ConversationsHandlers } from "./ConversationsHandlers.js"
import { ApiKeysHandlers } from "./ApiKeysHandlers.js"
import { ChannelsHandlers } from "./ChannelsHandlers.js"
import { ChannelDeliveryHandlers, DeliveriesHandlers } from "./DeliveriesHandlers.js"
import { ClientTokensHandlers } from "./ClientTokensHandlers.js"
import { ClientAuthLive } from "./ClientAuth.js"
import { ClientConversationsHandlers } from "./ClientConversationsHandlers.js"
import { PublishableKeysHandlers } from "./PublishableKeysHandlers.js"
import { RoutingRulesHandlers } from "./RoutingRulesHandlers.js"
import { SettingsHandlers } from "./SettingsHandlers.js"
import { UsersHandlers } from "./UsersHandlers.js"
import { EdgeMiddleware } from "./EdgeMiddleware.js"
import { DeprecationsPage, deprecationsRoutes } from "./DeprecationsPage.js"
import { DeprecationWarnings } from "./DeprecationWarnings.js"
import { LegacyRoutes, legacyRoutes } from "./LegacyRoutes.js"
import { Metrics } from "../ops/Metrics.js"
import { createNodeServer, type RequestClaim } from "./NodeServer.js"
import { OpenApiRoute, openApiRoutes } from "./OpenApiRoute.js"
import { ParleyApi } from "./ParleyApi.js"
import { type RouteSpec, RouteTableLive, routesOf } from "./RouteTable.js"
import { UploadRoutes, uploadRoutes } from "./UploadRoutes.js"
import { LiveConnections } from "../realtime/LiveConnections.js"
import { RealtimeMetrics } from "../realtime/RealtimeMetrics.js"
import { SocketBindingsLive } from "../realtime/SocketBindingsLive.js"
import { SocketEndpoints, SocketRoutes, socketRoutes } from "../realtime/SocketEndpoints.js"
import { SseRoute, sseRoutes } from "../realtime/SseRoute.js"

const ApiRoutes = HttpLayerRouter.addHttpApi(ParleyApi).pipe(
  Layer.provide(Layer.mergeAll(
    AdminHandlers,
    SettingsHandlers,
    UsersHandlers,
    ApiKeysHandlers,
    ChannelsHandlers,
    PublishableKeysHandlers,
    ConversationsHandlers,
    ConversationListHandlers,
    ClientTokensHandlers,
    ClientConversationsHandlers,
    RoutingRulesHandlers,
    DeliveriesHandlers,
    ChannelDeliveryHandlers
  )),
  // A step of its own: Layer.provide([A, B]) does not feed B into A.
  Layer.provide(Layer.mergeAll(AdminAuthLive, ManageAuthLive, TenantAuthLive, TenantKeyAuthLive, ClientAuthLive))
)

/**
 * The drain: readiness turns to `draining` (and new sockets and streams are refused) for
 * `DRAIN_REFUSE_MS` while balancers notice; then open ones are ended in batches. The routes must still be answering meanwhile, so
 * this runs before the server stops handling requests (see `HttpLive`).
 */
const DrainLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const lifecycle = yield* Lifecycle
    const config = yield* AppConfig
    const live = yield* LiveConnections
    yield* Effect.addFinalizer(() =>
      lifecycle.startDrain.pipe(
        Effect.zipRight(Effect.logInfo("draining")),
        Effect.zipRight(Effect.sleep(Duration.millis(config.drainRefuseMs))),
        // Then sockets and streams end in batches, while the server still answers their reconnects elsewhere.
        Effect.zipRight(live.drain)
      )
    )
  })
)

/** Every route the node serves, as its route table knows them. */
export const nodeRoutes: ReadonlyArray<RouteSpec> = [
  ...routesOf(ParleyApi),
  ...openApiRoutes,
  ...legacyRoutes,
  ...opsRoutes,
  ...deprecationsRoutes,
  ...uploadRoutes,
  ...sseRoutes,
  ...socketRoutes
]

/** Every route of the node behind the edge middleware. */
const AppRoutes = Layer.mergeAll(ApiRoutes, LegacyRoutes, OpsRoutes, DeprecationsPage, UploadRoutes, SseRoute, SocketRoutes, OpenApiRoute, EdgeMiddleware).pipe(
  Layer.provide(RouteTableLive(nodeRoutes))
)

/** Services the routes call per request. */
const RouteServices = ClientTokens.Default.pipe(Layer.provideMerge(Layer.mergeAll(
  Tenants.Default,
  ApiKeys.Default,
  Readiness.Default,
  Conversations.Default,
  ChannelTokens.Default,
  PortalUsers.Default,
  Channels.Default,
  PublishableKeys.Default,
  TokenSigner.Default,
  TokenRevocations.Default,
  DeprecationWarnings.Default,
  Deliveries.Default,
  ChannelDelivery.Default,
  Outbox.Default
)))

/** The live connections and the socket endpoints, over the route services. */
const RealtimeServices = SocketEndpoints.Default.pipe(
  // The bindings use the live connections (in-band refresh): built over them.
  Layer.provide(SocketBindingsLive),
  Layer.provideMerge(LiveConnections.Default),
  Layer.provideMerge(RealtimeMetrics.Default),
  Layer.provideMerge(RouteServices)
)

/** The HTTP server on `HOST`:`PORT`; the lean append route sees each request before the router. */
const leaveToRouter: RequestClaim = () => false

const ServerLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const claim = (yield* LeanAppendRoute) ? (yield* AppendRoute).claim : leaveToRouter
    const metrics = yield* Metrics
    const sockets = yield* SocketEndpoints
    return NodeHttpServer.layer(
      () => createNodeServer(claim, sockets.claim, metrics.countUnrouted),
      { host: config.host, port: config.port }
    )
  })
).pipe(Layer.provide(AppendRoute.Default))

/**
 * The node's HTTP service. Layers are released in the reverse order of building, and `serve`
 * stops handling requests as soon as it is released (requests arriving afterwards would hang):
 * DrainLive is therefore built on top of it, so that it is released first, while every route
 * still answers. Then the request handler goes, then the server closes, waiting for requests in
 * flight (bounded by the process's `DRAIN_MAX_MS` deadline).
 */
export const HttpLive = DrainLive.pipe(
  Layer.provide(HttpLayerRouter.serve(AppRoutes, { disableLogger: true, disableListenLog: true })),
  Layer.provide(ServerLive),
  // Merged into the output, so in-process test nodes can drain their sockets.
  Layer.provideMerge(RealtimeServices)
)
