import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"

/** Per-field validation messages: `{field: [message, …]}`. */
export const FieldErrors = Schema.Record({ key: Schema.String, value: Schema.Array(Schema.String) })
export type FieldErrors = typeof FieldErrors.Type

/** What the edge needs to render any client-visible error as the envelope. */
export interface WireError {
  readonly code: string
  readonly message: string
  readonly wireDetails: Record<string, unknown> | null
}


export class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 400 })) implements WireError {
  readonly code = "bad_request"
  readonly wireDetails = null
}

export class InvalidWatermark extends Schema.TaggedError<InvalidWatermark>()("InvalidWatermark", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 400 })) implements WireError {
  readonly code = "invalid_watermark"
  readonly wireDetails = null
}

/** The addressed channel is disabled. */
export class ChannelInactive extends Schema.TaggedError<ChannelInactive>()("ChannelInactive", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 400 })) implements WireError {
  readonly code = "channel_inactive"
  readonly wireDetails = null
}

/** The channel of the credential presented is disabled: 403 (client-api.md "Errors"). */
export class CredentialChannelInactive extends Schema.TaggedError<CredentialChannelInactive>()("CredentialChannelInactive", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 403 })) implements WireError {
  readonly code = "channel_inactive"
  readonly wireDetails = null
}

export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 401 })) implements WireError {
  readonly code = "unauthorized"
  readonly wireDetails = null
}

/** The 401 for an API key that names no key valid now. */
export const invalidApiKey = () => new Unauthorized({ message: "invalid, expired or revoked API key" })

/** A client token whose `exp` has passed; any other bad token is `Unauthorized`. */
export class TokenExpired extends Schema.TaggedError<TokenExpired>()("TokenExpired", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 401 })) implements WireError {
  readonly code = "token_expired"
  readonly wireDetails = null
}

/** A client token that was revoked, rotated past its grace period, or whose family or user was revoked. */
export class TokenRevoked extends Schema.TaggedError<TokenRevoked>()("TokenRevoked", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 401 })) implements WireError {
  readonly code = "token_revoked"
  readonly wireDetails = null
}

export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 403 })) implements WireError {
  readonly code = "forbidden"
  readonly wireDetails = null
}

/** An API key lacks a scope the route needs. */
export class InsufficientScope extends Schema.TaggedError<InsufficientScope>()("InsufficientScope", {
  message: Schema.String,
  required: Schema.Array(Schema.String)
}, HttpApiSchema.annotations({ status: 403 })) implements WireError {
  readonly code = "insufficient_scope"
  get wireDetails() {
    return { required: this.required }
  }
}

/** A client token lacks a permission the route needs (client-api.md "Permissions"). */
export class InsufficientPermission extends Schema.TaggedError<InsufficientPermission>()("InsufficientPermission", {
  message: Schema.String,
  required: Schema.Array(Schema.String)
}, HttpApiSchema.annotations({ status: 403 })) implements WireError {
  readonly code = "insufficient_permission"
  get wireDetails() {
    return { required: this.required }
  }
}

/** A publishable-key call without an `Origin` among the key's allowed origins. */
export class OriginNotAllowed extends Schema.TaggedError<OriginNotAllowed>()("OriginNotAllowed", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 403 })) implements WireError {
  readonly code = "origin_not_allowed"
  readonly wireDetails = null
}

export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 404 })) implements WireError {
  readonly code = "not_found"
  readonly wireDetails = null
}

/** No route takes this method at this URL; `allowed` are the methods that one does (`Allow`). */
export class MethodNotAllowed extends Schema.TaggedError<MethodNotAllowed>()("MethodNotAllowed", {
  message: Schema.String,
  allowed: Schema.Array(Schema.String)
}, HttpApiSchema.annotations({ status: 405 })) implements WireError {
  readonly code = "method_not_allowed"
  readonly wireDetails = null
}

export class NotAcceptable extends Schema.TaggedError<NotAcceptable>()("NotAcceptable", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 406 })) implements WireError {
  readonly code = "not_acceptable"
  readonly wireDetails = null
}

export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 409 })) implements WireError {
  readonly code = "conflict"
  readonly wireDetails = null
}

export class ConversationClosed extends Schema.TaggedError<ConversationClosed>()("ConversationClosed", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 409 })) implements WireError {
  readonly code = "conversation_closed"
  readonly wireDetails = null
}

/** `If-Match` named another version of the resource. */
export class PreconditionFailed extends Schema.TaggedError<PreconditionFailed>()("PreconditionFailed", {
  message: Schema.String,
  current_etag: Schema.String
}, HttpApiSchema.annotations({ status: 412 })) implements WireError {
  readonly code = "precondition_failed"
  get wireDetails() {
    return { current_etag: this.current_etag }
  }
}

export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", {
  message: Schema.String,
  max_bytes: Schema.Number
}, HttpApiSchema.annotations({ status: 413 })) implements WireError {
  readonly code = "payload_too_large"
  get wireDetails() {
    return { max_bytes: this.max_bytes }
  }
}

/** The sniffed type of an uploaded file is not among the tenant's allowed upload types. */
export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", {
  message: Schema.String,
  content_type: Schema.String
}, HttpApiSchema.annotations({ status: 415 })) implements WireError {
  readonly code = "unsupported_media_type"
  get wireDetails() {
    return { content_type: this.content_type }
  }
}

/** 502 `upstream_unavailable`: the file store failed; nothing of the upload was kept. */
export class StorageUnavailable extends Schema.TaggedError<StorageUnavailable>()("StorageUnavailable", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 502 })) implements WireError {
  readonly code = "upstream_unavailable"
  readonly wireDetails = null
}

/** An activity failed validation; `fields` maps stored field names to messages. */
export class InvalidMessage extends Schema.TaggedError<InvalidMessage>()("InvalidMessage", {
  message: Schema.String,
  fields: FieldErrors
}, HttpApiSchema.annotations({ status: 422 })) implements WireError {
  readonly code = "invalid_message"
  get wireDetails() {
    return this.fields
  }
}

/** A resource other than an activity failed validation. */
export class ValidationFailed extends Schema.TaggedError<ValidationFailed>()("ValidationFailed", {
  message: Schema.String,
  fields: FieldErrors
}, HttpApiSchema.annotations({ status: 422 })) implements WireError {
  readonly code = "validation_failed"
  get wireDetails() {
    return this.fields
  }
}

export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", {
  message: Schema.String,
  retry_after_ms: Schema.Number
}, HttpApiSchema.annotations({ status: 429 })) implements WireError {
  readonly code = "rate_limited"
  get wireDetails() {
    return { retry_after_ms: this.retry_after_ms }
  }
}

/** A plain HTTP request to a socket endpoint (client-api.md "Sockets"). */
export class UpgradeRequired extends Schema.TaggedError<UpgradeRequired>()("UpgradeRequired", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 426 })) implements WireError {
  readonly code = "upgrade_required"
  readonly wireDetails = null
}

/** No WebSocket subprotocol the client offered is one the endpoint speaks; `details.supported` lists them. */
export class UnsupportedProtocol extends Schema.TaggedError<UnsupportedProtocol>()("UnsupportedProtocol", {
  message: Schema.String,
  supported: Schema.Array(Schema.String)
}, HttpApiSchema.annotations({ status: 400 })) implements WireError {
  readonly code = "unsupported_protocol"
  get wireDetails() {
    return { supported: this.supported }
  }
}

/** Retry later; nothing was committed. */
export class Unavailable extends Schema.TaggedError<Unavailable>()("Unavailable", {
  message: Schema.String,
  reason: Schema.Literal("draining", "database_unavailable", "delivery_enqueue_failed", "cluster_unavailable"),
  retry_after_ms: Schema.optional(Schema.Number)
}, HttpApiSchema.annotations({ status: 503 })) implements WireError {
  readonly code = "unavailable"
  get wireDetails() {
    return this.retry_after_ms === undefined
      ? { reason: this.reason }
      : { reason: this.reason, retry_after_ms: this.retry_after_ms }
  }
}

/**
 * 502 `upstream_unavailable`: an append whose answer was lost and could not be settled. It may be
 * stored, so not a 503; a retry with the same idempotency key gets it or stores it once.
 */
export class OutcomeUnknown extends Schema.TaggedError<OutcomeUnknown>()("OutcomeUnknown", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 502 })) implements WireError {
  readonly code = "upstream_unavailable"
  // client-api.md "Errors": details are null for every code it does not give details to.
  readonly wireDetails = null
}

/** A 503's `retry_after_ms` is at least this, jittered up to twice that: refused clients do not all return at once. */
const RETRY_AFTER_MS = 1000
export const jitteredRetryAfterMs = () => RETRY_AFTER_MS + Math.floor(Math.random() * RETRY_AFTER_MS)

/** 503 while a conversation moves between nodes (or its owner is lost): retry after about a second. */
export const clusterUnavailable = () =>
  new Unavailable({
    message: "the conversation is moving between nodes, retry later",
    reason: "cluster_unavailable",
    retry_after_ms: jitteredRetryAfterMs()
  })

/** 503 for a failed database call: retry after about a second. */
export const databaseUnavailable = () =>
  new Unavailable({
    message: "the database is unavailable, retry later",
    reason: "database_unavailable",
    retry_after_ms: jitteredRetryAfterMs()
  })
