import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Context, Effect, Layer, Option, Schema } from "effect"
import { ChannelTokens } from "../auth/ChannelTokens.js"
import type { Actor } from "../auth/Actor.js"
import type { TenantGone } from "../db/ParentRows.js"
import {
  CredentialChannelInactive,
  Forbidden,
  InsufficientScope,
  invalidApiKey,
  Unauthorized,
  Unavailable,
  ValidationFailed
} from "../domain/ApiError.js"
import { allScopes, type AuthenticatedKey, type Scope } from "../domain/ApiKey.js"
import { ApiKeys } from "../tenants/ApiKeys.js"
import { envelope } from "./ErrorEnvelope.js"
import { DEPRECATION_HEADERS, logDeprecatedUse } from "./DeprecationsPage.js"
import { refuseUnstorableBody } from "./JsonBodyRules.js"

/** The tenant credential of the current request. */
export interface TenantCredential {
  readonly tenantId: string
  /** The API key of the request; null for a channel token. */
  readonly keyId: string | null
  readonly scopes: ReadonlyArray<Scope>
  /** The audit actor: `tenant_api` with the key id (the tenant id for the primary key). */
  readonly actor: Actor
  /** Set when the request came with a (deprecated) channel token: it reaches only that channel. */
  readonly channelId: string | null
}

export class CurrentCredential extends Context.Tag("parley/CurrentCredential")<CurrentCredential, TenantCredential>() {}

/** `effect`, or 403 `insufficient_scope` unless the credential holds `scope`. */
export const withScope = <A, E, R>(
  credential: TenantCredential,
  scope: Scope,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | InsufficientScope, R> =>
  credential.scopes.includes(scope)
    ? effect
    : Effect.fail(new InsufficientScope({ message: `this key lacks the ${scope} scope`, required: [scope] }))

/** 403 `insufficient_scope` unless the credential holds `scope`. */
export const checkScope = (credential: TenantCredential, scope: Scope) => withScope(credential, scope, Effect.succeed(credential))

/** 403 `insufficient_scope` unless the request's key holds `scope`. */
export const requireScope = (scope: Scope) => Effect.flatMap(CurrentCredential, (credential) => checkScope(credential, scope))

const security = { apiKey: HttpApiSecurity.apiKey({ key: "x-api-key", in: "header" }) }
const failure = Schema.Union(
  envelope(Unauthorized),
  envelope(Forbidden),
  envelope(InsufficientScope),
  envelope(Unavailable),
  envelope(ValidationFailed)
)

/** `x-api-key` on the management API; the key must hold `manage`, a channel token is refused (403). */
export class ManageAuth extends HttpApiMiddleware.Tag<ManageAuth>()("parley/ManageAuth", {
  failure,
  provides: CurrentCredential,
  security
}) {}

/**
 * A write whose tenant was deleted after its key was checked answers what the key gets now: 401, as
 * for a request that came after the delete (the key went with its tenant).
 */
export const keyGoneWithTenant = <A, E, R>(effect: Effect.Effect<A, E | TenantGone, R>) =>
  Effect.catchTag(effect, "TenantGone", () => Effect.fail(invalidApiKey()))

/** The credential an `x-api-key` header value stands for; 401 when it is missing or not valid now. */
export const credentialForApiKey = (
  keys: ApiKeys,
  raw: string | undefined
): Effect.Effect<TenantCredential, Unauthorized | Unavailable> =>
  raw === undefined || raw === ""
    ? Effect.fail(new Unauthorized({ message: "missing x-api-key" }))
    : Effect.flatMap(keys.authenticate(raw), (key) =>
      Option.isNone(key) ? Effect.fail(invalidApiKey()) : Effect.succeed(credentialOfKey(key.value)))

/** The credential of a valid API key. */
export const credentialOfKey = (key: AuthenticatedKey): TenantCredential => ({
  tenantId: key.tenantId,
  keyId: key.id,
  scopes: key.scopes,
  channelId: null,
  actor: { type: "tenant_api", id: key.kind === "primary" ? key.tenantId : key.id }
})

/**
 * A request authenticated by its channel token: one without an API key (an empty `x-api-key` is
 * none, as `credentialForApiKey` reads it) that carries `x-channel-token`.
 */
const byChannelToken = (request: HttpServerRequest.HttpServerRequest) => {
  const apiKey = request.headers["x-api-key"]
  return (apiKey === undefined || apiKey === "") && request.headers["x-channel-token"] !== undefined
}

const authenticate = (keys: ApiKeys) =>
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => credentialForApiKey(keys, request.headers["x-api-key"]))

export const ManageAuthLive = Layer.effect(
  ManageAuth,
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    return ManageAuth.of({
      apiKey: () =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          if (byChannelToken(request)) {
            return yield* new Forbidden({ message: "the management API does not accept channel tokens" })
          }
          const credential = yield* authenticate(keys)
          yield* requireScope("manage").pipe(Effect.provideService(CurrentCredential, credential))
          yield* refuseUnstorableBody
          return credential
        })
    })
  })
)

/**
 * Marks the response of a deprecated part of a request the route finds (`Deprecation`, `Link`)
 * and logs the use. Channel tokens and the legacy routes are marked at the edge, whatever the answer.
 */
export const markDeprecated = (surface: string) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeaders(response, DEPRECATION_HEADERS))
  ).pipe(Effect.zipRight(logDeprecatedUse(surface)))

/** Authenticates a deprecated channel token (the channel secret): every scope, but only for its own channel. */
export const authenticateChannelToken = (tokens: ChannelTokens, token: string) =>
  Effect.gen(function*() {
    const channel = yield* tokens.authenticate(token)
    return {
      tenantId: channel.tenant_id,
      keyId: null,
      scopes: allScopes,
      channelId: channel.id,
      actor: { type: "tenant_api", id: channel.id }
    } satisfies TenantCredential
  })

const tenantFailure = Schema.Union(
  envelope(Unauthorized),
  envelope(Forbidden),
  envelope(CredentialChannelInactive),
  envelope(Unavailable)
)

/** Tenant API routes marked "K, T": `x-api-key`, or the deprecated `x-channel-token`. */
export class TenantAuth extends HttpApiMiddleware.Tag<TenantAuth>()("parley/TenantAuth", {
  failure: tenantFailure,
  provides: CurrentCredential,
  security
}) {}

/** Tenant API routes marked "K only": a channel token is refused with 403. */
export class TenantKeyAuth extends HttpApiMiddleware.Tag<TenantKeyAuth>()("parley/TenantKeyAuth", {
  failure: tenantFailure,
  provides: CurrentCredential,
  security
}) {}

export const TenantAuthLive = Layer.effect(
  TenantAuth,
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    const tokens = yield* ChannelTokens
    return TenantAuth.of({
      apiKey: () =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const channelToken = request.headers["x-channel-token"]
          return byChannelToken(request) && channelToken !== undefined
            ? yield* authenticateChannelToken(tokens, channelToken)
            : yield* authenticate(keys)
        })
    })
  })
)

export const TenantKeyAuthLive = Layer.effect(
  TenantKeyAuth,
  Effect.gen(function*() {
    const keys = yield* ApiKeys
    return TenantKeyAuth.of({
      apiKey: () =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          if (byChannelToken(request)) {
            return yield* new Forbidden({ message: "this route does not accept channel tokens" })
          }
          return yield* authenticate(keys)
        })
    })
  })
)
