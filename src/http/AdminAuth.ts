import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Layer, Option, Redacted, Schema } from "effect"
import { CurrentActor } from "../auth/Actor.js"
import { constantTimeEquals } from "../auth/Credential.js"
import { AppConfig } from "../config/AppConfig.js"
import { inRanges } from "../config/NetworkList.js"
import { Forbidden, Unauthorized, ValidationFailed } from "../domain/ApiError.js"
import { clientAddress } from "./ClientAddress.js"
import { envelope } from "./ErrorEnvelope.js"
import { refuseUnstorableBody } from "./JsonBodyRules.js"

/** `Authorization: Bearer <ADMIN_API_TOKEN>` from an allowed address; off (401) when unset. */
export class AdminAuth extends HttpApiMiddleware.Tag<AdminAuth>()("parley/AdminAuth", {
  failure: Schema.Union(envelope(Unauthorized), envelope(Forbidden), envelope(ValidationFailed)),
  provides: CurrentActor,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

const unauthorized = (message: string) => Effect.fail(new Unauthorized({ message }))

export const AdminAuthLive = Layer.effect(
  AdminAuth,
  Effect.gen(function*() {
    const config = yield* AppConfig
    return AdminAuth.of({
      bearer: () =>
        Effect.gen(function*() {
          if (Option.isNone(config.adminApiToken)) return yield* unauthorized("the admin API is not configured")
          const request = yield* HttpServerRequest.HttpServerRequest
          if (!inRanges(clientAddress(request, config.trustedProxies), config.adminIpAllowlist)) {
            return yield* new Forbidden({ message: "this address may not use the admin API" })
          }
          const header = request.headers["authorization"] ?? ""
          const match = /^Bearer\s+(\S+)\s*$/i.exec(header)
          if (match === null || !constantTimeEquals(match[1]!, Redacted.value(config.adminApiToken.value))) {
            return yield* unauthorized("missing or invalid admin token")
          }
          yield* refuseUnstorableBody
          return { type: "admin_api", id: "admin" } as const
        })
    })
  })
)
