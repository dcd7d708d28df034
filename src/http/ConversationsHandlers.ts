import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Option } from "effect"
import { Conversations, type KeyCheck } from "../conversations/Conversations.js"
import { BadRequest } from "../domain/ApiError.js"
import { isOpaqueWatermark } from "../domain/Watermark.js"
import { RateLimiter } from "../ratelimit/RateLimiter.js"
import type { ActivityInput } from "../conversations/ActivityRules.js"
import { CurrentCredential, markDeprecated, requireScope, type TenantCredential, withScope } from "./TenantAuth.js"
import { decodeCursor, encodeCursor, parseLimit, parseUuid } from "./Paging.js"
import { ParleyApi } from "./ParleyApi.js"
import { RequestArrival } from "./RequestId.js"

/**
 * `POST /conversations/:id/activities` once the caller is known: scope, rate limit, append; the
 * answer is the stored activity (its route answers `{ data }`). A retry over the limit whose
 * idempotency key is already stored gets its activity, as any retry does. `arrivedAt` is when the
 * request arrived (epoch ms): the append's time budget counts from it.
 */
export const postActivity = (conversations: Conversations, limiter: RateLimiter) =>
(
  credential: TenantCredential,
  conversationId: string,
  payload: ActivityInput,
  idempotencyKey: string | undefined,
  arrivedAt: number,
  keyCheck?: KeyCheck
) =>
  withScope(
    credential,
    "write",
    Effect.zipRight(
      limiter.consume("activity_create", credential.tenantId, credential.tenantId),
      conversations.append(credential, conversationId, payload, {
        idempotencyKey: idempotencyKey ?? null,
        sourceChannelId: null,
        arrivedAt,
        keyCheck
      })
    )
  ).pipe(
    Effect.catchTag("RateLimited", (limited) =>
      idempotencyKey === undefined ? Effect.fail(limited) : conversations.storedUnderKey(credential, conversationId, idempotencyKey).pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.fail(limited), onSome: Effect.succeed }))
      ))
  )

export const ConversationsHandlers = HttpApiBuilder.group(ParleyApi, "conversations", (handlers) =>
  Effect.gen(function*() {
    const conversations = yield* Conversations
    const post = postActivity(conversations, yield* RateLimiter)
    const setStatus = (status: "active" | "closed") => ({ path }: { readonly path: { readonly id: string } }) =>
      Effect.gen(function*() {
        const credential = yield* requireScope("write")
        return { data: yield* conversations.setStatus(credential, path.id, status) }
      })
    return handlers
      .handle("get", ({ path }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("read")
          return { data: yield* conversations.get(credential, path.id, { channels: true }) }
        }))
      .handle("close", setStatus("closed"))
      .handle("reopen", setStatus("active"))
      .handle("appendActivity", ({ headers, path, payload }) =>
        Effect.flatMap(
          Effect.all([CurrentCredential, RequestArrival]),
          ([credential, arrivedAt]) =>
            Effect.map(post(credential, path.id, payload, headers["x-idempotency-key"], arrivedAt ?? Date.now()), (data) => ({ data }))
        ))
      .handle("listActivities", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("read")
          const limit = yield* parseLimit(urlParams.limit, 100, 1000)
          if (urlParams.watermark !== undefined && isOpaqueWatermark(urlParams.watermark)) {
            yield* markDeprecated("opaque watermark")
          }
          const page = yield* conversations.activities(credential, path.id, urlParams.watermark, limit)
          return { data: page.items, meta: { watermark: page.watermark, has_more: page.hasMore, limit } }
        }))
  }))

export const ConversationListHandlers = HttpApiBuilder.group(ParleyApi, "conversationList", (handlers) =>
  Effect.gen(function*() {
    const conversations = yield* Conversations
    return handlers.handle("list", ({ urlParams }) =>
      Effect.gen(function*() {
        const credential = yield* requireScope("read")
        const limit = yield* parseLimit(urlParams.limit, 50, 500)
        const status = urlParams.status ?? null
        if (status !== null && status !== "active" && status !== "closed") {
          return yield* new BadRequest({ message: "status must be active or closed" })
        }
        const channelId = urlParams.channel_id === undefined ? null : yield* parseUuid(urlParams.channel_id, "channel_id")
        const after = urlParams.cursor === undefined ? null : yield* decodeCursor(urlParams.cursor)
        const page = yield* conversations.list({
          tenantId: credential.tenantId,
          status,
          channelId,
          externalId: urlParams.external_id ?? null,
          after,
          limit
        })
        const last = page.items[page.items.length - 1]
        return {
          data: page.items,
          meta: {
            next_cursor: page.hasMore && last !== undefined ? encodeCursor(last.inserted_at, last.id) : null,
            has_more: page.hasMore,
            limit
          }
        }
      }))
  }))
