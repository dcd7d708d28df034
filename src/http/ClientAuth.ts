import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpApiSecurity from "@effect/platform/HttpApiSecurity"
import { Effect, Layer, Redacted, Schema } from "effect"
import { CurrentClient } from "../auth/ClientAccess.js"
import { ClientTokens } from "../auth/ClientTokens.js"
import {
  BadRequest,
  CredentialChannelInactive,
  TokenExpired,
  TokenRevoked,
  Unauthorized,
  Unavailable
} from "../domain/ApiError.js"
import { envelope } from "./ErrorEnvelope.js"

/**
 * `Authorization: Bearer <client token>` on the client API's conversation routes: provides `CurrentClient`;
 * routes apply the token-kind and permission rules with `ClientAccess`'s helpers.
 */
export class ClientAuth extends HttpApiMiddleware.Tag<ClientAuth>()("parley/ClientAuth", {
  failure: Schema.Union(
    envelope(BadRequest),
    envelope(Unauthorized),
    envelope(TokenExpired),
    envelope(TokenRevoked),
    envelope(CredentialChannelInactive),
    envelope(Unavailable)
  ),
  provides: CurrentClient,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

export const ClientAuthLive = Layer.effect(
  ClientAuth,
  Effect.map(ClientTokens, (tokens) =>
    ClientAuth.of({
      bearer: (credential) => {
        const token = Redacted.value(credential)
        return token === "" ? Effect.fail(new Unauthorized({ message: "missing Authorization: Bearer token" })) : tokens.authenticate(token)
      }
    }))
)
