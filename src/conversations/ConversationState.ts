import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"

/** What the conversation entity needs to know to accept appends. */
export const ConversationState = Schema.Struct({
  tenant_id: Schema.String,
  status: Schema.Literal("active", "closed"),
  head_seq: Schema.NumberFromString,
  updated_at: Schema.String,
  origin_channel_id: Schema.String
})
export type ConversationState = typeof ConversationState.Type

/** Loads a conversation's head, status and origin channel, as committed. */
export class ConversationStateRepo extends Effect.Service<ConversationStateRepo>()("parley/ConversationStateRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const load = SqlSchema.findOne({
      Request: Schema.String,
      Result: ConversationState,
      execute: (id) =>
        sql`SELECT c.tenant_id, c.status, c.head_seq, c.updated_at, c.origin_channel_id
            FROM conversations c WHERE c.id = ${id}`
    })
    return { load } as const
  })
}) {}
