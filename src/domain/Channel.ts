import { Schema } from "effect"
import { Window } from "./RateLimit.js"
import { TenantId } from "./Tenant.js"
import { LowerCaseUuid } from "./Uuid.js"

/** A channel's id, lower-case whatever case it was sent in. */
export const ChannelId = LowerCaseUuid("ChannelId")
export type ChannelId = typeof ChannelId.Type

/** Channel types of CONTRACT.md §4 (`webhook` is the default). */
export const ChannelType = Schema.Literal("webhook", "websocket", "http_pull", "echo", "email", "meta_messaging", "nats")
export type ChannelType = typeof ChannelType.Type

/** Which directions a channel carries; `duplex` is the default. */
export const ChannelMode = Schema.Literal("inbound", "outbound", "duplex")
export type ChannelMode = typeof ChannelMode.Type

/** An inactive channel neither accepts inbound messages nor receives deliveries. */
export const ChannelStatus = Schema.Literal("active", "inactive")
export type ChannelStatus = typeof ChannelStatus.Type

/** States of the delivery circuit breaker (server-apis.md "Delivery circuit breaker"). */
const CircuitState = Schema.Literal("closed", "open", "half_open", "paused")

/** How the delay between delivery attempts grows: doubling, by `base_ms` each time, or constant. */
export const Backoff = Schema.Literal("exponential", "linear", "fixed")
export type Backoff = typeof Backoff.Type

/** How deliveries to a channel are retried. */
export const RetryPolicy = Schema.Struct({
  max_attempts: Schema.Int,
  backoff: Backoff,
  base_ms: Schema.Int,
  max_ms: Schema.Int,
  timeout_ms: Schema.Int
})
export type RetryPolicy = typeof RetryPolicy.Type

/** The policy of a channel that did not choose one (docs/api-notes.md, "Channels"). */
export const DEFAULT_RETRY_POLICY: RetryPolicy = {
  max_attempts: 8,
  backoff: "exponential",
  base_ms: 1000,
  max_ms: 300_000,
  timeout_ms: 10_000
}

/** Inclusive bounds of each numeric retry-policy field. */
export const RETRY_POLICY_BOUNDS = {
  max_attempts: { min: 1, max: 100 },
  base_ms: { min: 1, max: 3_600_000 },
  max_ms: { min: 1, max: 86_400_000 },
  timeout_ms: { min: 1, max: 60_000 }
} as const

const defaulted = <S extends Schema.Schema.Any>(schema: S, value: Schema.Schema.Type<S>) =>
  Schema.optionalWith(schema, { default: () => value })

/** A policy as stored: rows written before a field existed read it as its default. */
export const StoredRetryPolicy = Schema.Struct({
  max_attempts: defaulted(Schema.Int, DEFAULT_RETRY_POLICY.max_attempts),
  backoff: defaulted(Backoff, DEFAULT_RETRY_POLICY.backoff),
  base_ms: defaulted(Schema.Int, DEFAULT_RETRY_POLICY.base_ms),
  max_ms: defaulted(Schema.Int, DEFAULT_RETRY_POLICY.max_ms),
  timeout_ms: defaulted(Schema.Int, DEFAULT_RETRY_POLICY.timeout_ms)
})

/** Upper bounds of a channel's own rate limit. */
export const RATE_LIMIT_BOUNDS = { limit: 1_000_000, scale_ms: 86_400_000 } as const

/** The middleware a transformation may name (CONTRACT.md §8); any other `type` is refused at save. */
export const TransformationType = Schema.Literal(
  "set_metadata",
  "remove_metadata",
  "prefix_text",
  "truncate_text",
  "redact_text"
)
export type TransformationType = typeof TransformationType.Type

/** One step of a middleware chain; its parameters sit beside `type` (checked by `validateTransformations`). */
export const Transformation = Schema.Struct(
  { type: Schema.String },
  Schema.Record({ key: Schema.String, value: Schema.Unknown })
)
export type Transformation = typeof Transformation.Type

/** At most this many transformations per channel. */
export const MAX_TRANSFORMATIONS = 50

/** A JSON object of free-form settings. */
export const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })
export type JsonObject = typeof JsonObject.Type

/** A channel as the management API shows it: credential-like config values are `[REDACTED]`. */
export class Channel extends Schema.Class<Channel>("Channel")({
  id: ChannelId,
  tenant_id: TenantId,
  name: Schema.String,
  type: ChannelType,
  mode: ChannelMode,
  status: ChannelStatus,
  require_signature: Schema.Boolean,
  config: JsonObject,
  transformations: Schema.Array(Transformation),
  retry_policy: RetryPolicy,
  rate_limit: Schema.NullOr(Window),
  circuit_state: CircuitState,
  inserted_at: Schema.String,
  updated_at: Schema.String
}) {}

/** A channel with its secret, as create and `rotate_secret` answer (the secret once). */
export const ChannelWithSecret = Schema.Struct({ ...Channel.fields, secret: Schema.String })

const optionalNumber = Schema.optional(Schema.Number)

/**
 * What a client may send for a channel. JSON types are checked here (400); values, ranges and the
 * per-type config by `validateChannel` (422 per field). Unknown fields are dropped.
 */
export const ChannelInput = Schema.Struct({
  name: Schema.optional(Schema.String),
  type: Schema.optional(Schema.String),
  mode: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  require_signature: Schema.optional(Schema.Boolean),
  config: Schema.optional(JsonObject),
  transformations: Schema.optional(Schema.Array(Transformation)),
  retry_policy: Schema.optional(Schema.Struct({
    max_attempts: optionalNumber,
    backoff: Schema.optional(Schema.String),
    base_ms: optionalNumber,
    max_ms: optionalNumber,
    timeout_ms: optionalNumber
  })),
  rate_limit: Schema.optional(Schema.NullOr(Schema.Struct({ limit: optionalNumber, scale_ms: optionalNumber })))
})
export type ChannelInput = typeof ChannelInput.Type
