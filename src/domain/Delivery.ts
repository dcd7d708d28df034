import { Schema } from "effect"
import { LowerCaseUuid } from "./Uuid.js"

/** A delivery's id, lower-case whatever case it was sent in. */
export const DeliveryId = LowerCaseUuid("DeliveryId")
export type DeliveryId = typeof DeliveryId.Type

/** Every status a delivery has (server-apis.md "Delivery receipts"); `failed` marks a dead letter. */
export const DeliveryStatus = Schema.Literal("pending", "sent", "delivered", "read", "failed")
export type DeliveryStatus = typeof DeliveryStatus.Type

const Instant = Schema.NullOr(Schema.String)

/** A delivery as the tenant API shows it (server-apis.md "Delivery"); `payload` is stored redacted. */
export const Delivery = Schema.Struct({
  id: Schema.String,
  activity_id: Schema.String,
  channel_id: Schema.String,
  status: DeliveryStatus,
  attempts: Schema.Int,
  last_error: Schema.NullOr(Schema.String),
  provider_message_id: Schema.NullOr(Schema.String),
  sent_at: Instant,
  delivered_at: Instant,
  read_at: Instant,
  retry_count: Schema.Int,
  retried_by: Schema.NullOr(Schema.String),
  retried_at: Instant,
  payload: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  inserted_at: Schema.String,
  updated_at: Schema.String
})
export type Delivery = typeof Delivery.Type

/** States of a channel's delivery circuit breaker (server-apis.md "Delivery circuit breaker"). */
export const CircuitState = Schema.Literal("closed", "open", "half_open", "paused")
export type CircuitState = typeof CircuitState.Type

/** `GET /channels/:id/delivery` (CONTRACT.md §7). */
export const ChannelDeliverySummary = Schema.Struct({
  channel_id: Schema.String,
  circuit_state: CircuitState,
  paused: Schema.Boolean,
  pending: Schema.Int,
  failed: Schema.Int,
  rate_limit: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})
export type ChannelDeliverySummary = typeof ChannelDeliverySummary.Type

/** One entry of an `http_pull` channel's outbox: its per-channel seq and the (redacted) activity. */
export const OutboxEntry = Schema.Struct({
  seq: Schema.Int,
  activity: Schema.Record({ key: Schema.String, value: Schema.Unknown })
})
export type OutboxEntry = typeof OutboxEntry.Type
