import { Schema, Struct } from "effect"
import { LowerCaseUuid, uuidBrander } from "./Uuid.js"

/** An activity's id, lower-case whatever case it was sent in. */
export const ActivityId = LowerCaseUuid("ActivityId")
export type ActivityId = typeof ActivityId.Type
/** An activity id from text already matched as a UUID (activity rules, watermarks). */
export const activityIdOf = uuidBrander<ActivityId>()

/** Every activity type a client may post; `deliveryReceipt` is internal and refused. */
export const ActivityType = Schema.Literal(
  "message",
  "event",
  "typing",
  "messageReaction",
  "messageUpdate",
  "messageDelete",
  "conversationUpdate",
  "endOfConversation"
)
export type ActivityType = typeof ActivityType.Type

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/**
 * The canonical activity (server-apis.md): the tenant API's shape and the body of outbound webhooks.
 * A plain struct, not a `Schema.Class`: two are made per append (ADR 0006).
 */
export const Activity = Schema.Struct({
  id: Schema.UUID,
  type: ActivityType,
  sender: Schema.String,
  text: Schema.NullOr(Schema.String),
  attachments: Schema.Array(JsonObject),
  metadata: JsonObject,
  idempotency_key: Schema.NullOr(Schema.String),
  seq: Schema.Int,
  reply_to_id: Schema.NullOr(Schema.UUID),
  message_type: Schema.NullOr(Schema.String),
  payload: Schema.NullOr(JsonObject),
  source_channel_id: Schema.NullOr(Schema.UUID),
  edited_at: Schema.NullOr(Schema.String),
  deleted_at: Schema.NullOr(Schema.String),
  conversation_id: Schema.UUID,
  tenant_id: Schema.UUID,
  inserted_at: Schema.String
}).annotations({ identifier: "Activity" })
export type Activity = typeof Activity.Type

/** An activity accepted by validation, before it has a seq: what the conversation entity appends. */
export const ActivityDraft = Schema.Struct(
  // `id` is chosen before the entity call, so a call re-sent after a crash is recognised.
  Struct.pick(
    Activity.fields,
    "id",
    "type",
    "sender",
    "text",
    "attachments",
    "metadata",
    "idempotency_key",
    "reply_to_id",
    "message_type",
    "payload",
    "source_channel_id"
  )
).annotations({ identifier: "ActivityDraft" })
export type ActivityDraft = typeof ActivityDraft.Type
