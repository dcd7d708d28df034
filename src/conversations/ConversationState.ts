import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { ChannelId } from "../domain/Channel.js"
import { ConversationId } from "../domain/Conversation.js"
import { TenantId } from "../domain/Tenant.js"

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/**
 * What the conversation entity needs to know to accept appends, and to plan their deliveries: the
 * conversation's metadata and participant are what routing conditions read, and neither changes
 * once the conversation exists.
 */
export const ConversationState = Schema.Struct({
  tenant_id: TenantId,
  status: Schema.Literal("active", "closed"),
  head_seq: Schema.NumberFromString,
  updated_at: Schema.String,
  origin_channel_id: ChannelId,
  metadata: JsonObject,
  participant: Schema.NullOr(Schema.Struct({
    external_id: Schema.NullOr(Schema.String),
    display_name: Schema.NullOr(Schema.String),
    metadata: JsonObject
  }))
})
export type ConversationState = typeof ConversationState.Type

/** Loads a conversation's head, status, origin channel, metadata and participant, as committed. */
export class ConversationStateRepo extends Effect.Service<ConversationStateRepo>()("parley/ConversationStateRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const load = SqlSchema.findOne({
      Request: ConversationId,
      Result: ConversationState,
      execute: (id) =>
        sql`SELECT c.tenant_id, c.status, c.head_seq, c.updated_at, c.origin_channel_id, c.metadata,
              CASE WHEN p.id IS NULL THEN NULL ELSE jsonb_build_object(
                'external_id', p.external_id, 'display_name', p.display_name, 'metadata', p.metadata) END AS participant
            FROM conversations c LEFT JOIN participants p ON p.id = c.participant_id WHERE c.id = ${id}`
    })
    return { load } as const
  })
}) {}
