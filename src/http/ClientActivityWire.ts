import { Either, Predicate, Schema } from "effect"
import type { ActivityInput } from "../conversations/ActivityRules.js"
import { InvalidMessage } from "../domain/ApiError.js"

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
 * The client body in the stored field names the activity rules read. The sender is `from.id`, else
 * the token's user, else the rules' default (`user`); `metadata` stands for `channelData` only when
 * that is absent. A `from` that is not an object is refused on `sender`, where the rules report it.
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
