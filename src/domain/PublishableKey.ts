import { Option, Schema } from "effect"
import { ChannelId } from "./Channel.js"

/** A disabled key is refused when exchanged for a token. */
export const PublishableKeyStatus = Schema.Literal("active", "disabled")
export type PublishableKeyStatus = typeof PublishableKeyStatus.Type

/** A publishable key as the management API shows it (CONTRACT.md §3); `key` only once. */
export class PublishableKey extends Schema.Class<PublishableKey>("PublishableKey")({
  id: Schema.UUID,
  channel_id: ChannelId,
  name: Schema.String,
  prefix: Schema.String,
  allowed_origins: Schema.Array(Schema.String),
  status: PublishableKeyStatus,
  inserted_at: Schema.String,
  updated_at: Schema.String
}) {}

/** A publishable key with its raw value, as create and rotate answer. */
export const PublishableKeyWithKey = Schema.Struct({ ...PublishableKey.fields, key: Schema.String })

/** What a client may send to create a key; checked by `PublishableKeys` (422 per field). */
export const NewPublishableKeyInput = Schema.Struct({
  name: Schema.optional(Schema.String),
  allowed_origins: Schema.optional(Schema.Array(Schema.String))
})
export type NewPublishableKeyInput = typeof NewPublishableKeyInput.Type

/** What a client may change on a key. */
export const PublishableKeyInput = Schema.Struct({
  ...NewPublishableKeyInput.fields,
  status: Schema.optional(Schema.String)
})
export type PublishableKeyInput = typeof PublishableKeyInput.Type

/** At most this many origins per key. */
export const MAX_ALLOWED_ORIGINS = 100

// Only the scheme and authority: a path (even "/"), query, fragment or credentials are refused.
const ORIGIN_SHAPE = /^https?:\/\/[^/?#@\s\\]+$/
const DNS_HOST = /^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$/

/**
 * The origin as browsers send it in `Origin` (lower case, default port dropped), when the text is
 * `scheme://host[:port]` with an http or https scheme; none for anything else, `*` included.
 */
export const normalizeOrigin = (text: string): Option.Option<string> => {
  const lower = text.trim().toLowerCase()
  if (!ORIGIN_SHAPE.test(lower) || !URL.canParse(lower)) return Option.none()
  const url = new URL(lower)
  // URL accepts hosts such as `*.example.com`; an origin names one DNS host or IP literal.
  return DNS_HOST.test(url.hostname) || url.hostname.startsWith("[") ? Option.some(url.origin) : Option.none()
}
