import type { Activity } from "../../domain/Activity.js"
import { encodeWatermark } from "../../domain/Watermark.js"
import { isUuid } from "../../domain/Uuid.js"
import { clientActivityOf } from "../../http/ClientActivityWire.js"

/**
 * The names one Phoenix-protocol binding speaks (CONTRACT.md §6): the `phoenix` binding and the deprecated
 * `legacy` one share one session and differ only here (client-api.md "Versioning" 5 maps the names).
 */
export interface PhoenixDialect {
  readonly binding: "phoenix" | "legacy"
  /** Prefix of a conversation topic; the conversation id follows it. */
  readonly conversationTopic: string
  /** Prefix of a channel topic (channel-scoped tokens), or null when the binding has none. */
  readonly channelTopic: string | null
  /** The key of the position in the join, `read` and `sync` payloads. */
  readonly positionKey: string
  /** The position as the conversation service reads it: any accepted watermark form, or undefined to start at the beginning. */
  readonly positionOf: (value: unknown) => string | undefined
  /** A position as this binding's events carry it (the `watermark` of `replay_unavailable`). */
  readonly watermarkOf: (seq: number) => string | number
  readonly postEvent: string
  /** The key of the idempotency key in the post payload. */
  readonly clientIdKey: string
  readonly activityEvent: string
  /** The payloads of the activity events for `activities` (in seq order): one set, or one per activity. */
  readonly activityPayloads: (
    activities: ReadonlyArray<Activity>,
    position: number | null,
    hasMore: boolean
  ) => ReadonlyArray<Readonly<Record<string, unknown>>>
  /** The `ok` response to a post. */
  readonly postReply: (activity: Activity) => Readonly<Record<string, unknown>>
  readonly deliveryStatusEvent: string
  readonly deliveryStatus: (userId: string, seq: number) => Readonly<Record<string, unknown>>
}

/** A watermark in any form `decodeWatermark` reads: a number or a string; anything else starts at the beginning. */
const watermarkText = (value: unknown): string | undefined =>
  typeof value === "number" ? String(value) : typeof value === "string" && value.length > 0 ? value : undefined

/** The activity set of the Phoenix binding: client shape plus `seq`, the opaque watermark. */
const activitySet = (activities: ReadonlyArray<Activity>, position: number | null, hasMore: boolean) => ({
  activities: activities.map((activity) => ({ ...clientActivityOf(activity), seq: activity.seq })),
  watermark: position === null ? null : encodeWatermark(position),
  has_more: hasMore
})

export const PhoenixNames: PhoenixDialect = {
  binding: "phoenix",
  conversationTopic: "chat:conversation:",
  channelTopic: "chat:channel:",
  positionKey: "watermark",
  positionOf: watermarkText,
  watermarkOf: encodeWatermark,
  postEvent: "postActivity",
  clientIdKey: "clientId",
  activityEvent: "activitySet",
  activityPayloads: (activities, position, hasMore) => [activitySet(activities, position, hasMore)],
  postReply: (activity) => ({ id: activity.id, seq: activity.seq, watermark: encodeWatermark(activity.seq) }),
  deliveryStatusEvent: "deliveryStatus",
  deliveryStatus: (userId, seq) => ({ userId, status: "read", seq })
}

/**
 * An activity in the legacy field names (client-api.md "Versioning" 5): the stored names, without
 * `idempotency_key`, `tenant_id` and the internal source channel.
 */
export const legacyActivityOf = (activity: Activity) => ({
  id: activity.id,
  seq: activity.seq,
  type: activity.type,
  sender: activity.sender,
  text: activity.text,
  attachments: activity.attachments,
  metadata: activity.metadata,
  reply_to_id: activity.reply_to_id,
  message_type: activity.message_type,
  payload: activity.payload,
  conversation_id: activity.conversation_id,
  inserted_at: activity.inserted_at,
  edited_at: activity.edited_at,
  deleted_at: activity.deleted_at
})

/** `last_activity_id`: an activity id (read as the legacy watermark form) or any watermark form. */
const legacyPosition = (value: unknown): string | undefined =>
  typeof value === "string" && isUuid(value)
    ? Buffer.from(value, "utf8").toString("base64url")
    : watermarkText(value)

export const LegacyNames: PhoenixDialect = {
  binding: "legacy",
  conversationTopic: "conversation:",
  channelTopic: null,
  positionKey: "last_activity_id",
  positionOf: legacyPosition,
  watermarkOf: (seq) => seq,
  postEvent: "new_activity",
  clientIdKey: "idempotency_key",
  activityEvent: "new_activity",
  // One event per activity, as the legacy clients read them.
  activityPayloads: (activities) => activities.map(legacyActivityOf),
  postReply: (activity) => ({ id: activity.id, seq: activity.seq }),
  deliveryStatusEvent: "delivery_status",
  deliveryStatus: (userId, seq) => ({ user_id: userId, status: "read", seq })
}
