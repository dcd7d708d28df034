import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { withScope } from "../auth/TenantCredential.js"
import { Conversations } from "../conversations/Conversations.js"
import { postActivity } from "../conversations/PostActivity.js"
import { BadRequest, InvalidWatermark } from "../domain/ApiError.js"
import { ChannelId } from "../domain/Channel.js"
import type { ConversationId } from "../domain/Conversation.js"
import { RateLimiter } from "../ratelimit/RateLimiter.js"
import { DeprecationWarnings } from "./DeprecationWarnings.js"
import { noteOpaqueWatermark } from "./OpaqueWatermark.js"
import { CurrentCredential, requireScope } from "./TenantAuth.js"
import { ACTIVITY_PAGE, CONVERSATION_PAGE, decodeCursor, pageAnswer, parseId, parseLimit } from "./Paging.js"
import { ParleyApi } from "./ParleyApi.js"
import { RequestArrival } from "./RequestId.js"

export const ConversationsHandlers = HttpApiBuilder.group(ParleyApi, "conversations", (handlers) =>
  Effect.gen(function*() {
    const conversations = yield* Conversations
    const post = postActivity(conversations, yield* RateLimiter)
    const warnings = yield* DeprecationWarnings
    const setStatus = (status: "active" | "closed") => ({ path }: { readonly path: { readonly id: ConversationId } }) =>
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
            Effect.map(
              withScope(credential, "write", post(credential, path.id, payload, headers["x-idempotency-key"], arrivedAt ?? Date.now())),
              (data) => ({ data })
            )
        ))
      .handle("listActivities", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("read")
          const limit = yield* parseLimit(urlParams.limit, ACTIVITY_PAGE)
          yield* noteOpaqueWatermark(warnings, urlParams.watermark, credential.channelId)
          const page = yield* conversations.activities(
            credential,
            path.id,
            {
              watermark: urlParams.watermark,
              onInvalidWatermark: (message) => Effect.fail(new InvalidWatermark({ message })),
              direction: "forward",
              before: null
            },
            limit
          )
          return { data: page.items, meta: { watermark: page.watermark, has_more: page.hasMore, limit } }
        }))
  }))

export const ConversationListHandlers = HttpApiBuilder.group(ParleyApi, "conversationList", (handlers) =>
  Effect.gen(function*() {
    const conversations = yield* Conversations
    return handlers.handle("list", ({ urlParams }) =>
      Effect.gen(function*() {
        const credential = yield* requireScope("read")
        const limit = yield* parseLimit(urlParams.limit, CONVERSATION_PAGE)
        const status = urlParams.status ?? null
        if (status !== null && status !== "active" && status !== "closed") {
          return yield* new BadRequest({ message: "status must be active or closed" })
        }
        const channelId = urlParams.channel_id === undefined ? null : yield* parseId(ChannelId, urlParams.channel_id, "channel_id")
        const after = urlParams.cursor === undefined ? null : yield* decodeCursor(urlParams.cursor)
        const page = yield* conversations.list({
          tenantId: credential.tenantId,
          status,
          channelId,
          externalId: urlParams.external_id ?? null,
          after,
          limit
        })
        return pageAnswer(page, limit)
      }))
  }))
