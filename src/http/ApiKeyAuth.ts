import { HttpApiMiddleware, HttpApiSecurity, HttpServerRequest } from "@effect/platform"
import { Context, Effect, Layer, Option, Schema } from "effect"
import type { Actor } from "../auth/Actor.js"
import { Forbidden, InsufficientScope, Unauthorized, Unavailable } from "../domain/ApiError.js"
import type { AuthenticatedKey, Scope } from "../domain/ApiKey.js"
import { ApiKeys } from "../tenants/ApiKeys.js"
import { envelope } from "./ErrorEnvelope.js"

/** The tenant credential of the current request. */
export interface TenantCredential {
  readonly tenantId: string
  readonly scopes: ReadonlyArray<Scope>
  /** The audit actor: `tenant_api` with the key id (the tenant id for the primary key). */
  readonly actor: Actor
  readonly key: AuthenticatedKey
}

export class CurrentCredential extends Context.Tag("parley/CurrentCredential")<CurrentCredential, TenantCredential>() {}

/** 403 `insufficient_scope` unless the request's key holds `scope`. */
export const requireScope = (scope: Scope) =>
  Effect.flatMap(CurrentCredential, (credential) =>
    credential.scopes.includes(scope)
      ? Effect.succeed(credential)
      : Effect.fail(new InsufficientScope({ message: `this key lacks the ${scope} scope`, required: [scope] })))

const security = { apiKey: HttpApiSecurity.apiKey({ key: "x-api-key", in: "header" }) }
const failure = Schema.Union(
  envelope(Unauthorized),
  envelope(Forbidden),
  envelope(InsufficientScope),
  envelope(Unavailable)
)

/** `x-api-key` on the management API; the key must hold `manage`, a channel token is refused (403). */
export class ManageAuth extends HttpApiMiddleware.Tag<ManageAuth>()("parley/ManageAuth", {
  failure,
  provides: CurrentCredential,
  security
}) {}

const authenticate = (keys: ApiKeys) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const raw = request.headers["x-api-key"]
    if (raw === undefined || raw === "") {
      return yield* new Unauthorized({ message: "missing x-api-key" })
    }
    const key = yield* keys.authenticate(raw)
    if (Option.isNone(key)) return yield* new Unauthorized({ message: "invalid, expired or revoked API key" })
    const { id, kind, scopes, tenantId } = key.value
    return {
      tenantId,
      scopes,
      key: key.value,
      actor: { type: "tenant_api", id: kind === "primary" ? tenantId : id }
    } satisfies TenantCredential
  })

export const ManageAuthLive = Layer.effect(
  ManageAuth,
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    return ManageAuth.of({
      apiKey: () =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          if (request.headers["x-api-key"] === undefined && request.headers["x-channel-token"] !== undefined) {
            return yield* new Forbidden({ message: "the management API does not accept channel tokens" })
          }
          const credential = yield* authenticate(keys)
          return yield* requireScope("manage").pipe(Effect.provideService(CurrentCredential, credential))
        })
    })
  })
)
