import { Predicate, Schema } from "effect"
import type { ConversationSummary } from "../conversations/ConversationRepo.js"

/** The contact of a conversation without a participant: the sender an activity gets without a user. */
const NO_CONTACT = "user"

/** A conversation in the client API's `GET /conversations` (client-api.md "Conversation list item"). */
export const ConversationListItem = Schema.Struct({
  id: Schema.String,
  title: Schema.String,
  contact: Schema.String,
  status: Schema.Literal("active", "closed"),
  lastMessage: Schema.NullOr(Schema.String),
  lastMessageAt: Schema.Int,
  lastSeq: Schema.Int,
  metadata: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  createdAt: Schema.String,
  updatedAt: Schema.String
}).annotations({ identifier: "ConversationListItem" })

/**
 * The list item of a summary: `title` is `metadata.title`, else the contact (the participant's display
 * name, else its external id); `lastMessageAt` the latest message's time, else the last update's.
 */
export const listItemOf = (summary: ConversationSummary): typeof ConversationListItem.Type => {
  const contact = summary.p_display_name ?? summary.p_external_id ?? NO_CONTACT
  const title = summary.metadata["title"]
  return {
    id: summary.id,
    title: Predicate.isString(title) ? title : contact,
    contact,
    status: summary.status,
    lastMessage: summary.last_deleted === true ? null : summary.last_text,
    lastMessageAt: Date.parse(summary.last_at ?? summary.updated_at),
    lastSeq: summary.head_seq,
    metadata: summary.metadata,
    createdAt: summary.inserted_at,
    updatedAt: summary.updated_at
  }
}
