import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Schema } from "effect"
import {
  CredentialChannelInactive,
  Forbidden,
  OriginNotAllowed,
  RateLimited,
  TokenExpired,
  TokenRevoked,
  Unauthorized,
  Unavailable
} from "../domain/ApiError.js"
import { Characters } from "../domain/Characters.js"
import { Permission } from "../domain/ClientToken.js"
import { envelope } from "./ErrorEnvelope.js"
import { optionalBody } from "./OptionalBody.js"

/** A user id: it becomes the sender of what the token's holder posts. */
const UserId = Characters(1, 256)

export const GenerateTokenBody = optionalBody({
  user: Schema.optional(Schema.Struct({ id: UserId })),
  scope: Schema.optional(Schema.Literal("channel")),
  permissions: Schema.optional(Schema.NonEmptyArray(Permission))
})

export const RevokeTokenBody = optionalBody({
  token: Schema.optional(Schema.String),
  user: Schema.optional(Schema.Struct({ id: UserId }))
})

export const PublishableTokenBody = optionalBody({ resume: Schema.optional(Schema.String) })

const TokenFields = { token: Schema.String, expires_in: Schema.Int }

/** The token routes of the client API (client-api.md, `/api/v1/chat/tokens/*`). */
export class ClientTokensApi extends HttpApiGroup.make("clientTokens")
  .add(
    HttpApiEndpoint.post("generate", "/tokens/generate")
      .setPayload(GenerateTokenBody)
      .addSuccess(Schema.Struct({
        conversationId: Schema.Null,
        ...TokenFields,
        permissions: Schema.NullOr(Schema.Array(Permission))
      }))
  )
  .add(
    HttpApiEndpoint.post("refresh", "/tokens/refresh")
      .addSuccess(Schema.Struct({ conversationId: Schema.NullOr(Schema.String), ...TokenFields }))
      .addError(envelope(TokenExpired))
      .addError(envelope(TokenRevoked))
      .addError(envelope(CredentialChannelInactive))
  )
  .add(
    HttpApiEndpoint.post("revoke", "/tokens/revoke")
      .setPayload(RevokeTokenBody)
      .addSuccess(Schema.Struct({ revoked: Schema.Literal("token", "user") }))
      .addError(envelope(TokenExpired))
      .addError(envelope(TokenRevoked))
      .addError(envelope(CredentialChannelInactive))
      .addError(envelope(Forbidden))
  )
  .add(
    HttpApiEndpoint.post("publishable", "/tokens/publishable")
      .setPayload(PublishableTokenBody)
      .addSuccess(Schema.Struct({
        conversationId: Schema.String,
        ...TokenFields,
        userId: Schema.String,
        resume: Schema.String,
        resumed: Schema.Boolean
      }))
      .addError(envelope(OriginNotAllowed))
  )
  .addError(envelope(Unauthorized))
  .addError(envelope(RateLimited))
  .addError(envelope(Unavailable))
  .prefix("/api/v1/chat")
{}
