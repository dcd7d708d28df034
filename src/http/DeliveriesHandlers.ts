import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Option } from "effect"
import { ChannelDelivery } from "../delivery/ChannelDelivery.js"
import { Deliveries } from "../delivery/Deliveries.js"
import { Outbox } from "../delivery/Outbox.js"
import { BadRequest, InvalidWatermark } from "../domain/ApiError.js"
import { ActivityId } from "../domain/Activity.js"
import { ChannelId } from "../domain/Channel.js"
import { ConversationId } from "../domain/Conversation.js"
import { DeliveryStatus } from "../domain/Delivery.js"
import { decodeCursor, pageAnswer, type PageSize, parseId, parseLimit } from "./Paging.js"
import { ParleyApi } from "./ParleyApi.js"
import { requireScope } from "./TenantAuth.js"

/** A page of `GET /deliveries` (CONTRACT.md §7). */
const DELIVERY_PAGE: PageSize = { fallback: 50, max: 500 }
/** A page of an `http_pull` outbox (CONTRACT.md §7). */
const OUTBOX_PAGE: PageSize = { fallback: 100, max: 1000 }

const STATUSES: ReadonlyArray<string> = DeliveryStatus.literals

/**
 * An outbox watermark: a non-negative integer seq, as a JSON number or its decimal string (at most
 * 15 digits, so it stays exact); anything else is 400 `invalid_watermark`.
 */
const parseOutboxWatermark = (raw: unknown) =>
  typeof raw === "number" && Number.isSafeInteger(raw) && raw >= 0
    ? Effect.succeed(raw)
    : typeof raw === "string" && raw.length >= 1 && raw.length <= 15 && /^\d+$/.test(raw)
    ? Effect.succeed(Number(raw))
    : Effect.fail(new InvalidWatermark({ message: "watermark must be a non-negative integer" }))

const optionalId = <A>(id: Parameters<typeof parseId<A>>[0], raw: string | undefined, name: string) =>
  raw === undefined ? Effect.succeed(null) : parseId(id, raw, name)

export const DeliveriesHandlers = HttpApiBuilder.group(ParleyApi, "deliveries", (handlers) =>
  Effect.gen(function*() {
    const deliveries = yield* Deliveries
    return handlers
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("read")
          const limit = yield* parseLimit(urlParams.limit, DELIVERY_PAGE)
          const status = urlParams.status ?? null
          if (status !== null && !STATUSES.includes(status)) {
            return yield* new BadRequest({ message: `status must be one of ${STATUSES.join(", ")}` })
          }
          const page = yield* deliveries.list(credential.tenantId, {
            status: status as DeliveryStatus | null,
            channelId: yield* optionalId(ChannelId, urlParams.channel_id, "channel_id"),
            activityId: yield* optionalId(ActivityId, urlParams.activity_id, "activity_id"),
            conversationId: yield* optionalId(ConversationId, urlParams.conversation_id, "conversation_id"),
            after: urlParams.cursor === undefined ? null : yield* decodeCursor(urlParams.cursor),
            limit
          })
          return pageAnswer(page, limit)
        }))
      .handle("retry", ({ path }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("write")
          return { data: yield* deliveries.retry(credential, path.id) }
        }))
      .handle("retryChannel", ({ path }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("write")
          return { data: { retried: yield* deliveries.retryChannel(credential, path.id) } }
        }))
  }))

export const ChannelDeliveryHandlers = HttpApiBuilder.group(ParleyApi, "channelDelivery", (handlers) =>
  Effect.gen(function*() {
    const channels = yield* ChannelDelivery
    const outbox = yield* Outbox
    return handlers
      .handle("summary", ({ path }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("read")
          return { data: yield* channels.summary(credential, path.id) }
        }))
      .handle("pause", ({ path }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("manage")
          return { data: yield* channels.pause(credential, path.id) }
        }))
      .handle("resume", ({ path }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("manage")
          return { data: yield* channels.resume(credential, path.id) }
        }))
      .handle("outbox", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("read")
          const limit = yield* parseLimit(urlParams.limit, OUTBOX_PAGE)
          const watermark = urlParams.watermark === undefined
            ? Option.none<number>()
            : Option.some(yield* parseOutboxWatermark(urlParams.watermark))
          // A sent watermark acknowledges: that is a write.
          if (Option.isSome(watermark)) yield* requireScope("write")
          const page = yield* outbox.poll(credential, path.id, watermark, limit)
          return { data: page.entries, meta: { watermark: page.watermark, has_more: page.hasMore, limit } }
        }))
      .handle("ack", ({ path, payload }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("write")
          const watermark = yield* parseOutboxWatermark(payload.watermark)
          return { data: { acknowledged: yield* outbox.ack(credential, path.id, watermark) } }
        }))
  }))
