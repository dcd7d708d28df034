import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import { NodeHttpServer } from "@effect/platform-node"
import { ConfigProvider, Layer } from "effect"
import { createServer } from "node:http"
import { AppConfig } from "../../src/config/AppConfig.js"
import { EdgeMiddleware } from "../../src/http/EdgeMiddleware.js"
import { type RouteSpec, RouteTableLive } from "../../src/http/RouteTable.js"
import { Lifecycle } from "../../src/ops/Lifecycle.js"
import { Metrics } from "../../src/ops/Metrics.js"

/**
 * Stand-in routes behind the real edge middleware, on their own server on 127.0.0.1:`port`, with
 * the settings of `env` (defaults for the rest). `specs` are the routes' methods and templates.
 */
export const EdgeApp = (
  port: number,
  routes: Layer.Layer<never, never, HttpLayerRouter.HttpRouter>,
  specs: ReadonlyArray<RouteSpec>,
  env: Record<string, string> = {}
) =>
  HttpLayerRouter.serve(Layer.mergeAll(routes, EdgeMiddleware), { disableLogger: true, disableListenLog: true }).pipe(
    Layer.provide(NodeHttpServer.layer(createServer, { host: "127.0.0.1", port })),
    Layer.provide([Metrics.Default, Lifecycle.Default]),
    Layer.provide(RouteTableLive(specs)),
    Layer.provide(AppConfig.Default),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
  )
