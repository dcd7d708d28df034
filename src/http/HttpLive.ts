import { HttpLayerRouter } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Duration, Effect, Layer } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { AddressGuard } from "../delivery/AddressGuard.js"
import { Lifecycle } from "../ops/Lifecycle.js"
import { OpsRoutes, opsRoutes } from "../ops/OpsRoutes.js"
import { Readiness } from "../ops/Readiness.js"
import { ApiKeys } from "../tenants/ApiKeys.js"
import { Tenants } from "../tenants/Tenants.js"
import { AdminAuthLive } from "./AdminAuth.js"
import { AdminHandlers } from "./AdminHandlers.js"
import { ManageAuthLive } from "./ApiKeyAuth.js"
import { SettingsHandlers } from "./SettingsHandlers.js"
import { EdgeMiddleware } from "./EdgeMiddleware.js"
import { createNodeServer } from "./NodeServer.js"
import { ParleyApi } from "./ParleyApi.js"
import { RouteTableLive, routesOf } from "./RouteTable.js"

const ApiRoutes = HttpLayerRouter.addHttpApi(ParleyApi, { openapiPath: "/api/v1/openapi.json" }).pipe(
  Layer.provide(Layer.mergeAll(AdminHandlers, SettingsHandlers)),
  // A step of its own: Layer.provide([A, B]) does not feed B into A.
  Layer.provide(Layer.mergeAll(AdminAuthLive, ManageAuthLive))
)

/**
 * Runs first when the routes shut down (before the server closes): readiness turns to `draining`,
 * and new long-lived connections are refused for `DRAIN_REFUSE_MS` while balancers notice.
 */
const DrainLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const lifecycle = yield* Lifecycle
    const config = yield* AppConfig
    yield* Effect.addFinalizer(() =>
      lifecycle.startDrain.pipe(
        Effect.zipRight(Effect.logInfo("draining")),
        Effect.zipRight(Effect.sleep(Duration.millis(config.drainRefuseMs)))
      )
    )
  })
)

/** Every route of the node behind the edge middleware. */
export const AppRoutes = Layer.mergeAll(ApiRoutes, OpsRoutes, EdgeMiddleware, DrainLive).pipe(
  Layer.provide(RouteTableLive([
    ...routesOf(ParleyApi),
    { method: "GET", path: "/api/v1/openapi.json" },
    ...opsRoutes
  ]))
)

/** Services the routes call per request. */
export const RouteServices = Layer.mergeAll(Tenants.Default, ApiKeys.Default, Readiness.Default).pipe(
  Layer.provideMerge(AddressGuard.Default)
)

/** The HTTP server on `HOST`:`PORT`. */
export const ServerLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) => NodeHttpServer.layer(createNodeServer, { host: config.host, port: config.port }))
)

export const HttpLive = HttpLayerRouter.serve(AppRoutes, { disableLogger: true, disableListenLog: true }).pipe(
  Layer.provide(ServerLive),
  Layer.provide(RouteServices)
)
