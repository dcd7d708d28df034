import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Schema } from "effect"
import { BadRequest, InsufficientScope, InvalidWatermark, NotFound, Unavailable } from "../domain/ApiError.js"
import { ChannelId } from "../domain/Channel.js"
import { ChannelDeliverySummary, CircuitState, Delivery, DeliveryId, OutboxEntry } from "../domain/Delivery.js"
import { NotFailed, UnsupportedChannelType } from "../domain/DeliveryErrors.js"
import { envelope } from "./ErrorEnvelope.js"
import { TenantAuth, TenantKeyAuth } from "./TenantAuth.js"

const ChannelPath = Schema.Struct({ id: ChannelId })
const DeliveryPath = Schema.Struct({ id: DeliveryId })
const PageMeta = Schema.Struct({ next_cursor: Schema.NullOr(Schema.String), has_more: Schema.Boolean, limit: Schema.Int })
const CircuitChange = Schema.Struct({ data: Schema.Struct({ channel_id: Schema.String, circuit_state: CircuitState }) })

/** Delivery routes of the tenant API marked "K only" (CONTRACT.md §7). */
export class DeliveriesApi extends HttpApiGroup.make("deliveries")
  .add(
    HttpApiEndpoint.get("list", "/deliveries")
      .setUrlParams(Schema.Struct({
        status: Schema.optional(Schema.String),
        channel_id: Schema.optional(Schema.String),
        activity_id: Schema.optional(Schema.String),
        conversation_id: Schema.optional(Schema.String),
        limit: Schema.optional(Schema.String),
        cursor: Schema.optional(Schema.String)
      }))
      .addSuccess(Schema.Struct({ data: Schema.Array(Delivery), meta: PageMeta }))
  )
  .add(
    HttpApiEndpoint.post("retry", "/deliveries/:id/retry")
      .setPath(DeliveryPath)
      .addSuccess(Schema.Struct({ data: Delivery }))
      .addError(envelope(NotFailed))
  )
  .add(
    HttpApiEndpoint.post("retryChannel", "/channels/:id/deliveries/retry")
      .setPath(ChannelPath)
      .addSuccess(Schema.Struct({ data: Schema.Struct({ retried: Schema.Int }) }))
  )
  .addError(envelope(NotFound))
  .addError(envelope(BadRequest))
  .addError(envelope(InsufficientScope))
  .addError(envelope(Unavailable))
  .middleware(TenantKeyAuth)
  .prefix("/api/v1")
{}

/** A channel's delivery state, pause and resume, and the `http_pull` outbox: "K, T" routes (CONTRACT.md §7). */
export class ChannelDeliveryApi extends HttpApiGroup.make("channelDelivery")
  .add(
    HttpApiEndpoint.get("summary", "/channels/:id/delivery")
      .setPath(ChannelPath)
      .addSuccess(Schema.Struct({ data: ChannelDeliverySummary }))
  )
  .add(HttpApiEndpoint.post("pause", "/channels/:id/pause").setPath(ChannelPath).addSuccess(CircuitChange))
  .add(HttpApiEndpoint.post("resume", "/channels/:id/resume").setPath(ChannelPath).addSuccess(CircuitChange))
  .add(
    HttpApiEndpoint.get("outbox", "/channels/:id/outbox")
      .setPath(ChannelPath)
      .setUrlParams(Schema.Struct({ watermark: Schema.optional(Schema.String), limit: Schema.optional(Schema.String) }))
      .addSuccess(Schema.Struct({
        data: Schema.Array(OutboxEntry),
        meta: Schema.Struct({ watermark: Schema.Int, has_more: Schema.Boolean, limit: Schema.Int })
      }))
  )
  .add(
    HttpApiEndpoint.post("ack", "/channels/:id/outbox/ack")
      .setPath(ChannelPath)
      // Checked by the handler, so that any wrong watermark is 400 `invalid_watermark`.
      .setPayload(Schema.Struct({ watermark: Schema.optional(Schema.Unknown) }))
      .addSuccess(Schema.Struct({ data: Schema.Struct({ acknowledged: Schema.Int }) }))
  )
  .addError(envelope(NotFound))
  .addError(envelope(BadRequest))
  .addError(envelope(InvalidWatermark))
  .addError(envelope(UnsupportedChannelType))
  .addError(envelope(InsufficientScope))
  .addError(envelope(Unavailable))
  .middleware(TenantAuth)
  .prefix("/api/v1")
{}
