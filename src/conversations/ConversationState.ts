import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { ChannelId } from "../domain/Channel.js"
import { ConversationId } from "../domain/Conversation.js"
import { TenantId } from "../domain/Tenant.js"

/** What the conversation entity needs to know to accept appends. */
export const ConversationState = Schema.Struct({
  tenant_id: TenantId,
  status: Schema.Literal("active", "closed"),
  head_seq: Schema.NumberFromString,
  updated_at: Schema.String,
  origin_channel_id: ChannelId
})
export type ConversationState = typeof ConversationState.Type

/** Loads a conversation's head, status and origin channel, as committed. */
export class ConversationStateRepo extends Effect.Service<ConversationStateRepo>()("parley/ConversationStateRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const load = SqlSchema.findOne({
      Request: ConversationId,
      Result: ConversationState,
      execute: (id) =>
        sql`SELECT c.tenant_id, c.status, c.head_seq, c.updated_at, c.origin_channel_id
            FROM conversations c WHERE c.id = ${id}`
    })
    return { load } as const
  })
}) {}
