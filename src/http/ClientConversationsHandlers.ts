import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Either, Option } from "effect"
import { type ClientPrincipal, requireChannelScope, requireConversationBinding, requirePermission } from "../auth/ClientAccess.js"
import { ClientTokens } from "../auth/ClientTokens.js"
import { AppConfig } from "../config/AppConfig.js"
import { Conversations, type ConversationScope } from "../conversations/Conversations.js"
import { postActivity } from "../conversations/PostActivity.js"
import { BadRequest, CredentialChannelInactive, Forbidden, Unauthorized } from "../domain/ApiError.js"
import type { ConversationId } from "../domain/Conversation.js"
import { parseInstant } from "../domain/Instant.js"
import type { Permission } from "../domain/ClientToken.js"
import { RateLimiter } from "../ratelimit/RateLimiter.js"
import { activityInputOf, clientActivityOf, frameOf } from "./ClientActivityWire.js"
import { listItemOf } from "./ConversationListItem.js"
import { DeprecationWarnings } from "./DeprecationWarnings.js"
import { noteOpaqueWatermark } from "./OpaqueWatermark.js"
import { ACTIVITY_PAGE, CONVERSATION_PAGE, decodeCursor, encodeCursor, parseLimit } from "./Paging.js"
import { ParleyApi } from "./ParleyApi.js"
import { RequestArrival } from "./RequestId.js"
import { streamUrl } from "./PublicUrl.js"

/** What a client token reaches: its own tenant and channel. */
const scopeOf = (client: ClientPrincipal): ConversationScope => ({ tenantId: client.tenantId, channelId: client.channelId })

/**
 * Where a client appends. A token bound to the conversation was derived for it on its channel, and a
 * conversation never changes channel: the tenant scope suffices, sparing the append its look-up first.
 */
const appendScopeOf = (client: ClientPrincipal, id: ConversationId): ConversationScope =>
  client.conversationId === id ? { tenantId: client.tenantId, channelId: null } : scopeOf(client)

/**
 * The token-kind and permission rules on one conversation: a bound token only on its own (403), then the
 * permission; another channel's conversation is a 404 where the route looks it up.
 */
const onConversation = (id: ConversationId, permission: Permission) =>
  Effect.zipRight(requireConversationBinding(id), requirePermission(permission))

/** `before`: a positive integer seq, up to the largest exact one; 400 otherwise. */
const parseBefore = (raw: string | undefined) =>
  raw === undefined
    ? Effect.succeed(null)
    : /^\d{1,16}$/.test(raw) && Number(raw) >= 1 && Number.isSafeInteger(Number(raw))
    ? Effect.succeed(Number(raw))
    : Effect.fail(new BadRequest({ message: "before must be a positive integer seq" }))

/** `updated_since`: ISO 8601 or milliseconds since the epoch, as an ISO instant; 400 otherwise. */
const parseUpdatedSince = (raw: string | undefined) => {
  if (raw === undefined) return Effect.succeed(null)
  const instant = /^\d{1,13}$/.test(raw) ? Option.some(new Date(Number(raw))) : parseInstant(raw)
  return Option.match(instant, {
    onNone: () => Effect.fail(new BadRequest({ message: "updated_since must be ISO 8601 or milliseconds since the epoch" })),
    onSome: (date) => Effect.succeed(date.toISOString())
  })
}

/** Source marker in the metadata of conversations the client API starts. */
const CLIENT_SOURCE = "client_api"

export const ClientConversationsHandlers = HttpApiBuilder.group(ParleyApi, "clientConversations", (handlers) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const conversations = yield* Conversations
    const tokens = yield* ClientTokens
    const post = postActivity(conversations, yield* RateLimiter)
    const warnings = yield* DeprecationWarnings

    /** A token bound to the conversation, derived from the caller's, and the socket URL to stream it. */
    const session = (client: ClientPrincipal, conversationId: ConversationId, watermark?: string) =>
      Effect.gen(function*() {
        const issued = yield* tokens.derive(client, conversationId)
        const request = yield* HttpServerRequest.HttpServerRequest
        return {
          conversationId,
          token: issued.token,
          expires_in: issued.expiresIn,
          streamUrl: streamUrl(request, config.trustedProxies, `${config.host}:${config.port}`, {
            token: issued.token,
            conversationId,
            watermark
          })
        }
      })

    const setStatus = (status: "active" | "closed") => ({ path }: { readonly path: { readonly id: ConversationId } }) =>
      Effect.gen(function*() {
        const client = yield* onConversation(path.id, "write")
        const after = yield* conversations.setStatus(scopeOf(client), path.id, status)
        return { conversationId: after.id, status: after.status }
      })

    return handlers
      .handle("create", ({ payload }) =>
        Effect.gen(function*() {
          const client = yield* requirePermission("write")
          if (client.kind === "conversation") {
            return yield* new Forbidden({ message: "a conversation-bound token cannot start another conversation" })
          }
          const conversation = yield* conversations.create({
            tenantId: client.tenantId,
            channelId: client.channelId,
            status: "active",
            metadata: { source: CLIENT_SOURCE, ...(payload.title === undefined ? {} : { title: payload.title }) },
            participant: client.userId ?? undefined
          }).pipe(
            // The channel changed since the token was checked: what ClientAuth answers now.
            Effect.catchTags({
              ChannelInactive: ({ message }) => Effect.fail(new CredentialChannelInactive({ message })),
              NotFound: () => Effect.fail(new Unauthorized({ message: "the channel of this token no longer exists" }))
            })
          )
          return yield* session(client, conversation.id)
        }))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const client = yield* Effect.zipRight(requireChannelScope, requirePermission("read"))
          const limit = yield* parseLimit(urlParams.limit, CONVERSATION_PAGE)
          const after = urlParams.cursor === undefined ? null : yield* decodeCursor(urlParams.cursor)
          const page = yield* conversations.listForChannel({
            tenantId: client.tenantId,
            channelId: client.channelId,
            status: urlParams.status ?? null,
            updatedSince: yield* parseUpdatedSince(urlParams.updated_since),
            after,
            limit
          })
          const last = page.items[page.items.length - 1]
          return {
            conversations: page.items.map(listItemOf),
            cursor: page.hasMore && last !== undefined ? encodeCursor(last.updated_at, last.id) : null,
            has_more: page.hasMore
          }
        }))
      .handle("reconnect", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const client = yield* onConversation(path.id, "read")
          // The status is not checked: a closed conversation can still be read.
          yield* conversations.get(scopeOf(client), path.id, { channels: false })
          return yield* session(client, path.id, urlParams.watermark)
        }))
      .handle("close", setStatus("closed"))
      .handle("reopen", setStatus("active"))
      .handle("postActivity", ({ headers, path, payload }) =>
        Effect.gen(function*() {
          const client = yield* onConversation(path.id, "write")
          const input = activityInputOf(payload, client.userId)
          if (Either.isLeft(input)) return yield* input.left
          const arrivedAt = (yield* RequestArrival) ?? Date.now()
          const stored = yield* post(appendScopeOf(client, path.id), path.id, input.right, headers["x-idempotency-key"], arrivedAt)
          return { id: stored.id }
        }))
      .handle("listActivities", ({ path, urlParams }) =>
        Effect.gen(function*() {
          const client = yield* onConversation(path.id, "read")
          const before = yield* parseBefore(urlParams.before)
          const limit = yield* parseLimit(urlParams.limit, ACTIVITY_PAGE)
          const direction = urlParams.direction ?? "forward"
          yield* noteOpaqueWatermark(warnings, urlParams.watermark, client.channelId)
          const page = yield* conversations.activities(
            scopeOf(client),
            path.id,
            // An invalid watermark is not an error here: the list starts at the beginning.
            { watermark: urlParams.watermark, onInvalidWatermark: () => Effect.succeed(null), direction, before },
            limit
          )
          const position = {
            watermark: page.watermark,
            has_more: page.hasMore,
            ...(direction === "backward"
              ? { cursor: page.hasMore && page.items.length > 0 ? String(page.items[0]!.seq) : null }
              : {})
          }
          if (urlParams.format === "frames") {
            const viewer = client.userId ?? urlParams.userId ?? null
            return { frames: page.items.map((activity) => frameOf(activity, viewer)), ...position }
          }
          return { activities: page.items.map(clientActivityOf), ...position }
        }))
  }))

