import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { orUnavailable } from "../db/SqlFailure.js"
import { CredentialChannelInactive, Unauthorized } from "../domain/ApiError.js"
import { ChannelId } from "../domain/Channel.js"
import { TenantId } from "../domain/Tenant.js"
import { hashCredential } from "./Credential.js"

/** The channel a channel secret belongs to, with the states that decide whether it may be used. */
const ChannelOfSecret = Schema.Struct({
  id: ChannelId,
  tenant_id: TenantId,
  status: Schema.Literal("active", "inactive"),
  tenant_status: Schema.Literal("active", "inactive")
})
export type ChannelOfSecret = typeof ChannelOfSecret.Type

/** 401 for a channel secret that names no usable channel. */
export const invalidChannelToken = () => new Unauthorized({ message: "invalid channel token" })

/** Looks channels up by their secret (`x-channel-token`, `tokens/generate`); only hashes are stored. */
export class ChannelTokens extends Effect.Service<ChannelTokens>()("parley/ChannelTokens", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const find = SqlSchema.findOne({
      Request: Schema.Uint8ArrayFromSelf,
      Result: ChannelOfSecret,
      execute: (hash) =>
        sql`SELECT c.id, c.tenant_id, c.status, t.status AS tenant_status
            FROM channels c JOIN tenants t ON t.id = c.tenant_id WHERE c.secret_hash = ${hash}`
    })

    /**
     * The channel of a secret, usable only while its tenant is active (401 otherwise, like an
     * unknown secret); a disabled channel is 403 `channel_inactive` (it is the credential's own).
     */
    const authenticate = (secret: string) =>
      Effect.gen(function*() {
        // A value the database cannot compare names no channel.
        const channel = yield* find(hashCredential(secret)).pipe(
          orUnavailable,
          Effect.catchTag("BadRequest", () => Effect.succeedNone)
        )
        if (Option.isNone(channel) || channel.value.tenant_status !== "active") {
          return yield* invalidChannelToken()
        }
        if (channel.value.status !== "active") {
          return yield* new CredentialChannelInactive({ message: "the channel of this token is inactive" })
        }
        return channel.value
      })

    return { authenticate } as const
  })
}) {}
