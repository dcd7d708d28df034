import { Schema } from "effect"
import { ChannelId } from "./Channel.js"
import { TenantId } from "./Tenant.js"
import { LowerCaseUuid, uuidBrander } from "./Uuid.js"

/** A conversation's id, lower-case whatever case it was sent in. */
export const ConversationId = LowerCaseUuid("ConversationId")
export type ConversationId = typeof ConversationId.Type
/** A conversation id from text already matched as a UUID (the append route, entity addresses). */
export const conversationIdOf = uuidBrander<ConversationId>()

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** The external party of a conversation. */
export class Participant extends Schema.Class<Participant>("Participant")({
  id: Schema.UUID,
  external_id: Schema.String,
  display_name: Schema.NullOr(Schema.String),
  opted_out_at: Schema.NullOr(Schema.String)
}) {}

/** A channel a conversation is linked to (`channels` of `GET /conversations/:id`). */
export class ConversationChannel extends Schema.Class<ConversationChannel>("ConversationChannel")({
  channel_id: ChannelId,
  role: Schema.Literal("origin", "target", "member"),
  participant_id: Schema.NullOr(Schema.UUID),
  inserted_at: Schema.String
}) {}

/** A conversation as the tenant API shows it; `channels` only on get. */
export class Conversation extends Schema.Class<Conversation>("Conversation")({
  id: ConversationId,
  status: Schema.Literal("active", "closed"),
  metadata: JsonObject,
  channel_id: ChannelId,
  origin_channel_id: ChannelId,
  tenant_id: TenantId,
  participant_id: Schema.NullOr(Schema.UUID),
  participant: Schema.NullOr(Participant),
  channels: Schema.optional(Schema.Array(ConversationChannel)),
  inserted_at: Schema.String,
  updated_at: Schema.String
}) {}
