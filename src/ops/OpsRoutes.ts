import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Layer, Option, Redacted } from "effect"
import { constantTimeEquals } from "../auth/Credential.js"
import { AppConfig } from "../config/AppConfig.js"
import type { RouteSpec } from "../http/RouteTable.js"
import { Metrics } from "./Metrics.js"
import { Readiness } from "./Readiness.js"

/** Probes and metrics: plain bodies, never the error envelope. */
export const opsRoutes: ReadonlyArray<RouteSpec> = [
  { method: "GET", path: "/health/live" },
  { method: "GET", path: "/health/ready" },
  { method: "GET", path: "/metrics" }
]

const Live = HttpLayerRouter.add("GET", "/health/live", HttpServerResponse.unsafeJson({ status: "ok" }))

const Ready = HttpLayerRouter.add(
  "GET",
  "/health/ready",
  Effect.gen(function*() {
    const report = yield* (yield* Readiness).check
    return report.status === "ready"
      ? HttpServerResponse.unsafeJson({ status: report.status, checks: report.checks })
      : HttpServerResponse.unsafeJson(report, { status: 503, headers: { "retry-after": "5" } })
  })
)

const MetricsRoute = HttpLayerRouter.add(
  "GET",
  "/metrics",
  Effect.gen(function*() {
    const config = yield* AppConfig
    const metrics = yield* Metrics
    if (Option.isSome(config.metricsToken)) {
      const request = yield* HttpServerRequest.HttpServerRequest
      const match = /^Bearer\s+(\S+)\s*$/i.exec(request.headers["authorization"] ?? "")
      if (match === null || !constantTimeEquals(match[1]!, Redacted.value(config.metricsToken.value))) {
        return HttpServerResponse.text("unauthorized\n", { status: 401, headers: { "www-authenticate": "Bearer" } })
      }
    }
    return HttpServerResponse.text(yield* metrics.render, { contentType: metrics.contentType })
  })
)

export const OpsRoutes = Layer.mergeAll(Live, Ready, MetricsRoute)
