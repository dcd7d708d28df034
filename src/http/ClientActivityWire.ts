import { Either, Predicate, Schema } from "effect"
import type { ActivityInput } from "../conversations/ActivityRules.js"
import { type Activity, ActivityType } from "../domain/Activity.js"
import { InvalidMessage } from "../domain/ApiError.js"

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/**
 * The body of `POST /api/v1/chat/conversations/:id/activities` (client-api.md): only these fields
 * are read, each checked by the activity rules, so a wrong type is 422 `invalid_message`.
 */
export const ClientActivityBody = Schema.Struct({
  type: Schema.optional(Schema.Unknown),
  text: Schema.optional(Schema.Unknown),
  attachments: Schema.optional(Schema.Unknown),
  replyToId: Schema.optional(Schema.Unknown),
  channelData: Schema.optional(Schema.Unknown),
  metadata: Schema.optional(Schema.Unknown),
  messageType: Schema.optional(Schema.Unknown),
  payload: Schema.optional(Schema.Unknown),
  from: Schema.optional(Schema.Unknown)
})
export type ClientActivityBody = typeof ClientActivityBody.Type

const absent = (value: unknown) => value === undefined || value === null

/**
 * The client body in the stored field names the activity rules read. A `from` that is not an object is
 * refused on `sender`, where the rules report it.
 */
export const activityInputOf = (body: ClientActivityBody, userId: string | null): Either.Either<ActivityInput, InvalidMessage> => {
  const from = body.from
  if (!absent(from) && !Predicate.isRecord(from)) {
    return Either.left(new InvalidMessage({ message: "the activity is invalid", fields: { sender: ["from must be an object with an id"] } }))
  }
  const fromId = Predicate.isRecord(from) ? from["id"] : undefined
  return Either.right({
    type: body.type,
    text: body.text,
    attachments: body.attachments,
    metadata: absent(body.channelData) ? body.metadata : body.channelData,
    reply_to_id: body.replyToId,
    message_type: body.messageType,
    payload: body.payload,
    sender: absent(fromId) ? userId ?? undefined : fromId
  })
}

/** An activity as the client API lists it (client-api.md "Activity", without `seq`: the watermark carries position). */
export const ClientActivity = Schema.Struct({
  id: Schema.String,
  type: ActivityType,
  from: Schema.Struct({ id: Schema.String }),
  text: Schema.NullOr(Schema.String),
  timestamp: Schema.String,
  attachments: Schema.Array(JsonObject),
  conversationId: Schema.String,
  channelData: JsonObject,
  replyToId: Schema.NullOr(Schema.String),
  messageType: Schema.NullOr(Schema.String),
  payload: Schema.NullOr(JsonObject),
  editedAt: Schema.NullOr(Schema.String),
  deletedAt: Schema.NullOr(Schema.String)
}).annotations({ identifier: "ClientActivity" })

export const clientActivityOf = (activity: Activity): typeof ClientActivity.Type => ({
  id: activity.id,
  type: activity.type,
  from: { id: activity.sender },
  text: activity.text,
  timestamp: activity.inserted_at,
  attachments: activity.attachments,
  conversationId: activity.conversation_id,
  channelData: activity.metadata,
  replyToId: activity.reply_to_id,
  messageType: activity.message_type,
  payload: activity.payload,
  editedAt: activity.edited_at,
  deletedAt: activity.deleted_at
})

/** A persistent Protocol v1 server frame of an activity (client-api.md "Frame"). */
export const ActivityFrame = Schema.Struct({
  type: Schema.String,
  seq: Schema.Int,
  id: Schema.String,
  from: Schema.Literal("user", "bot"),
  sender: Schema.Struct({ id: Schema.String, role: Schema.Literal("user", "bot", "system") }),
  data: JsonObject,
  timestamp: Schema.Int
}).annotations({ identifier: "ActivityFrame" })

/**
 * What a frame carries: a typed message its payload, a plain message `{text}` (and its attachments,
 * when it has any), any other activity its text, target and channel data.
 */
const frameData = (activity: Activity): Record<string, unknown> =>
  activity.type === "message"
    ? activity.payload ?? (activity.attachments.length > 0
      ? { text: activity.text, attachments: activity.attachments }
      : { text: activity.text })
    : { text: activity.text, replyToId: activity.reply_to_id, channelData: activity.metadata }

/**
 * The frame of an activity seen by `viewer` (the end user whose activities are `from=user`): a typed
 * message takes its `messageType` as frame type, a plain message `text`, any other activity its type.
 */
export const frameOf = (activity: Activity, viewer: string | null): typeof ActivityFrame.Type => {
  const from = viewer !== null && activity.sender === viewer ? "user" : "bot"
  return {
    type: activity.type === "message" ? activity.message_type ?? "text" : activity.type,
    seq: activity.seq,
    id: activity.id,
    from,
    sender: { id: activity.sender, role: activity.sender === "system" ? "system" : from },
    data: frameData(activity),
    timestamp: Date.parse(activity.inserted_at)
  }
}
