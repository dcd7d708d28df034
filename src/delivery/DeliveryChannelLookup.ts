import type { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import type { TenantCredential } from "../auth/TenantCredential.js"
import { NotFound } from "../domain/ApiError.js"
import type { ChannelId } from "../domain/Channel.js"
import { CircuitState } from "../domain/Delivery.js"

/** What the delivery routes read of a channel. */
export const DeliveryChannelRow = Schema.Struct({
  id: Schema.String,
  type: Schema.String,
  circuit_state: CircuitState,
  rate_limit: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})
export type DeliveryChannelRow = typeof DeliveryChannelRow.Type

const decodeRows = Schema.decodeUnknown(Schema.Array(DeliveryChannelRow))

/** 404 as the spec words it for a channel that is unknown, foreign, or not the channel token's own. */
export const channelNotFound = (id: string) => new NotFound({ message: `channel ${id} not found` })

/**
 * The credential's channel `id`: 404 when it is another tenant's, missing, or (for a deprecated
 * channel token, which reaches only its own channel) another channel. SQL and decode failures are
 * left for the caller's `orUnavailable`.
 */
export const lookupDeliveryChannel = (sql: SqlClient.SqlClient, credential: TenantCredential, id: ChannelId) =>
  credential.channelId !== null && credential.channelId !== id
    ? Effect.fail(channelNotFound(id))
    : sql`SELECT id, type, circuit_state, rate_limit FROM channels WHERE id = ${id} AND tenant_id = ${credential.tenantId}`
      .pipe(
        Effect.flatMap(decodeRows),
        Effect.flatMap((rows) => rows[0] === undefined ? Effect.fail(channelNotFound(id)) : Effect.succeed(rows[0]))
      )
