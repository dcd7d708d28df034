import { Either, Schema } from "effect"
import { type ActivityId, activityIdOf, ActivityType } from "../domain/Activity.js"
import { InvalidMessage } from "../domain/ApiError.js"
import { exceedsCharacters } from "../domain/Characters.js"
import { Problems } from "../domain/Problems.js"
import { findUnstorable } from "../domain/Unstorable.js"
import { checkPayload, MESSAGE_TYPE_NAME, textOf } from "../domain/TypedMessage.js"
import { isUuid } from "../domain/Uuid.js"

/** Byte limits of the documents ("Limits"). */
export const Limits = {
  text: 65_536,
  reaction: 64,
  attachments: 10,
  attachmentBytes: 4_096,
  metadata: 16_384,
  payload: 131_072,
  sender: 256
} as const

const ATTACHMENT_KEYS = ["contentType", "contentUrl", "name", "size", "thumbnailUrl", "content", "channelData"] as const
const NEEDS_TARGET = new Set(["messageReaction", "messageUpdate", "messageDelete"])

/** Why an edit or reaction of a deleted message is refused (422 on `reply_to_id`). */
export const DELETED_TARGET = "the message is deleted: it cannot be edited or reacted to"

/** Whether an activity is refused once the message its `reply_to_id` names is deleted: an edit or a reaction. */
export const refusedOnDeletedTarget = (type: string) => type === "messageUpdate" || type === "messageReaction"

const isType = Schema.is(ActivityType)
const bytes = (text: string) => Buffer.byteLength(text, "utf8")
const encoder = new TextEncoder()

/** The longest prefix of `text` within `maxBytes` of UTF-8, cut between characters. */
const truncateUtf8 = (text: string, maxBytes: number): string =>
  bytes(text) <= maxBytes ? text : text.slice(0, encoder.encodeInto(text, new Uint8Array(maxBytes)).read)

/** Adds the problem of the first value of `value` that would not be stored as sent, if any. */
const checkStorable = (field: string, value: unknown, problems: Problems): void => {
  const found = findUnstorable(value)
  if (found !== undefined) problems.add(field, found.problem)
}

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)

/** A posted activity as read from any API, in stored field names; every field still unchecked. */
export interface ActivityInput {
  readonly type?: unknown
  readonly text?: unknown
  readonly attachments?: unknown
  readonly metadata?: unknown
  readonly reply_to_id?: unknown
  readonly message_type?: unknown
  readonly payload?: unknown
  readonly sender?: unknown
}

/** The checked fields of a new activity. */
export interface CheckedActivity {
  readonly type: ActivityType
  readonly sender: string
  readonly text: string | null
  readonly attachments: ReadonlyArray<Record<string, unknown>>
  readonly metadata: Record<string, unknown>
  readonly reply_to_id: ActivityId | null
  readonly message_type: string | null
  readonly payload: Record<string, unknown> | null
}

const checkAttachments = (input: unknown, problems: Problems): ReadonlyArray<Record<string, unknown>> => {
  if (input === undefined || input === null) return []
  if (!Array.isArray(input)) {
    problems.add("attachments", "must be an array")
    return []
  }
  if (input.length > Limits.attachments) problems.add("attachments", `at most ${Limits.attachments} attachments`)
  const kept: Array<Record<string, unknown>> = []
  input.forEach((item, i) => {
    if (!isObject(item)) return problems.add("attachments", `attachment ${i} must be an object`)
    if (typeof item["contentType"] !== "string" || item["contentType"].length === 0) {
      return problems.add("attachments", `attachment ${i} needs a contentType`)
    }
    const attachment = Object.fromEntries(ATTACHMENT_KEYS.filter((k) => k in item).map((k) => [k, item[k]]))
    if (bytes(JSON.stringify(attachment)) > Limits.attachmentBytes) {
      return problems.add("attachments", `attachment ${i} exceeds ${Limits.attachmentBytes} bytes`)
    }
    kept.push(attachment)
  })
  return kept
}

/**
 * Checks a posted activity against every documented rule that needs no database (422
 * `invalid_message`, details keyed by stored field names). `reply_to_id` existence is checked later.
 */
export const checkActivity = (input: ActivityInput): Either.Either<CheckedActivity, InvalidMessage> => {
  const problems = new Problems()
  const type = input.type === undefined || input.type === null ? "message" : input.type
  if (!isType(type)) problems.add("type", "unknown or internal activity type")

  let sender = "user"
  if (input.sender !== undefined && input.sender !== null) {
    if (typeof input.sender !== "string" || input.sender.length === 0 || exceedsCharacters(input.sender, Limits.sender)) {
      problems.add("sender", `must be a string of 1 to ${Limits.sender} characters`)
    } else {
      checkStorable("sender", input.sender, problems)
      sender = input.sender
    }
  }

  let text: string | null = null
  if (input.text !== undefined && input.text !== null) {
    if (typeof input.text !== "string") problems.add("text", "must be a string")
    else {
      const limit = type === "messageReaction" ? Limits.reaction : Limits.text
      if (bytes(input.text) > limit) problems.add("text", `at most ${limit} bytes`)
      checkStorable("text", input.text, problems)
      text = input.text
    }
  }
  // The emoji is what a reaction says: one without it says nothing.
  if (type === "messageReaction" && (text === null || text === "") && problems.errors["text"] === undefined) {
    problems.add("text", "the reaction's emoji is required for messageReaction")
  }

  const attachments = checkAttachments(input.attachments, problems)
  checkStorable("attachments", attachments, problems)

  let metadata: Record<string, unknown> = {}
  if (input.metadata !== undefined && input.metadata !== null) {
    if (!isObject(input.metadata)) problems.add("metadata", "must be an object")
    else if (bytes(JSON.stringify(input.metadata)) > Limits.metadata) problems.add("metadata", `at most ${Limits.metadata} bytes`)
    else {
      checkStorable("metadata", input.metadata, problems)
      metadata = input.metadata
    }
  }

  let replyToId: ActivityId | null = null
  if (input.reply_to_id !== undefined && input.reply_to_id !== null) {
    if (typeof input.reply_to_id !== "string" || !isUuid(input.reply_to_id)) problems.add("reply_to_id", "must be a UUID")
    else replyToId = activityIdOf(input.reply_to_id)
  } else if (typeof type === "string" && NEEDS_TARGET.has(type)) {
    problems.add("reply_to_id", `is required for ${type}`)
  }

  let messageType: string | null = null
  let payload: Record<string, unknown> | null = null
  const hasType = input.message_type !== undefined && input.message_type !== null
  const hasPayload = input.payload !== undefined && input.payload !== null
  if (hasType || hasPayload) {
    if (type !== "message") problems.add("message_type", "typed messages must have type message")
    if (!hasType) problems.add("message_type", "is required with payload")
    else if (typeof input.message_type !== "string" || !MESSAGE_TYPE_NAME.test(input.message_type)) {
      problems.add("message_type", "must be a renderer name")
    } else messageType = input.message_type
    if (!hasPayload) problems.add("payload", "is required with message_type")
    else if (!isObject(input.payload)) problems.add("payload", "must be an object")
    else if (bytes(JSON.stringify(input.payload)) > Limits.payload) problems.add("payload", `at most ${Limits.payload} bytes`)
    else {
      const unstorable = findUnstorable(input.payload)
      if (unstorable !== undefined) problems.add("payload", unstorable.problem)
      else if (messageType !== null) {
        const checked = checkPayload(messageType, input.payload)
        if (Either.isLeft(checked)) checked.left.forEach((message) => problems.add("payload", message))
        else payload = input.payload
      }
    }
  }
  if (messageType !== null && payload !== null && text === null) {
    const derived = textOf(messageType, payload)
    text = derived === null ? null : truncateUtf8(derived, Limits.text)
  }

  const checked: CheckedActivity = {
    type: type as ActivityType,
    sender,
    text,
    attachments,
    metadata,
    reply_to_id: replyToId,
    message_type: messageType,
    payload
  }
  return problems.isEmpty
    ? Either.right(checked)
    : Either.left(new InvalidMessage({ message: "the activity is invalid", fields: problems.errors }))
}
