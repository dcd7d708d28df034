import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect } from "effect"
import { ChannelTokens } from "../auth/ChannelTokens.js"
import { ClientTokens } from "../auth/ClientTokens.js"
import { AppConfig } from "../config/AppConfig.js"
import { BadRequest, Unauthorized } from "../domain/ApiError.js"
import { findUnstorable } from "../domain/Unstorable.js"
import { bearerCredential, looksLikeToken } from "./BearerCredential.js"
import { clientAddress } from "./ClientAddress.js"
import { ParleyApi } from "./ParleyApi.js"

const missingBearer = () => new Unauthorized({ message: "missing Authorization: Bearer credential" })

/** The request's bearer credential; 401 without one. */
const bearer = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
  const credential = bearerCredential(request)
  return credential === undefined ? Effect.fail(missingBearer()) : Effect.succeed(credential)
})

/** A user id the database would store changed (U+0000, a lone surrogate) is refused, not altered. */
const storableUserId = (userId: string | undefined) =>
  userId !== undefined && findUnstorable(userId) !== undefined
    ? Effect.fail(new BadRequest({ message: "user.id cannot be stored" }))
    : Effect.void

export const ClientTokensHandlers = HttpApiBuilder.group(ParleyApi, "clientTokens", (handlers) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const channelTokens = yield* ChannelTokens
    const tokens = yield* ClientTokens

    /** The channel of a Bearer channel secret; a disabled channel is 401 here, as client-api.md maps it. */
    const channelOfSecret = (secret: string) =>
      channelTokens.authenticate(secret).pipe(
        Effect.catchTag("CredentialChannelInactive", ({ message }) => Effect.fail(new Unauthorized({ message })))
      )

    return handlers
      .handle("generate", ({ payload }) =>
        Effect.gen(function*() {
          const credential = yield* bearer
          if (looksLikeToken(credential)) {
            return yield* new BadRequest({ message: "tokens/generate takes the channel secret, not a token" })
          }
          const channel = yield* channelOfSecret(credential)
          yield* storableUserId(payload.user?.id)
          const permissions = payload.permissions === undefined ? undefined : [...new Set(payload.permissions)]
          const issued = yield* tokens.generate(channel, { userId: payload.user?.id, scope: payload.scope, permissions })
          return { conversationId: null, token: issued.token, expires_in: issued.expiresIn, permissions: permissions ?? null }
        }))
      .handle("refresh", () =>
        Effect.gen(function*() {
          const issued = yield* tokens.refresh(yield* bearer)
          return { conversationId: issued.conversationId, token: issued.token, expires_in: issued.expiresIn }
        }))
      .handle("revoke", ({ payload }) =>
        Effect.gen(function*() {
          const credential = yield* bearer
          if (looksLikeToken(credential)) {
            yield* tokens.revokeOwn(credential)
            return { revoked: "token" as const }
          }
          const channel = yield* channelOfSecret(credential)
          yield* tokens.limitChannel(channel)
          if (payload.token !== undefined && payload.user === undefined) {
            yield* tokens.revokeForChannel(channel, payload.token)
            return { revoked: "token" as const }
          }
          if (payload.user !== undefined && payload.token === undefined) {
            yield* tokens.revokeUser(channel, payload.user.id)
            return { revoked: "user" as const }
          }
          return yield* new BadRequest({ message: "with the channel secret, send exactly one of token and user.id" })
        }))
      .handle("publishable", ({ payload }) =>
        Effect.gen(function*() {
          const request = yield* HttpServerRequest.HttpServerRequest
          const issued = yield* tokens.publishable({
            key: yield* bearer,
            origin: request.headers["origin"],
            clientAddress: clientAddress(request, config.trustedProxies),
            resume: payload.resume
          })
          return {
            conversationId: issued.conversationId,
            token: issued.token,
            expires_in: issued.expiresIn,
            userId: issued.userId,
            resume: issued.resume,
            resumed: issued.resumed
          }
        }))
  }))
