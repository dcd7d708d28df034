import { Chunk, Duration, Effect, Either, FiberMap, Queue, type Scope, Stream } from "effect"
import { type ClientPrincipal, socketScopeOf } from "../../auth/ClientAccess.js"
import { Channels } from "../../channels/Channels.js"
import { Conversations, type ConversationScope } from "../../conversations/Conversations.js"
import { postActivity } from "../../conversations/PostActivity.js"
import type { Activity } from "../../domain/Activity.js"
import type { WireError } from "../../domain/ApiError.js"
import type { Permission } from "../../domain/ClientToken.js"
import { type ConversationId, conversationIdOf } from "../../domain/Conversation.js"
import { isUuid } from "../../domain/Uuid.js"
import { decodeWatermark } from "../../domain/Watermark.js"
import { activityInputOf } from "../../http/ClientActivityWire.js"
import { RateLimiter } from "../../ratelimit/RateLimiter.js"
import { ChannelFeed } from "../ChannelFeed.js"
import { ConversationHub } from "../ConversationHub.js"
import { ConversationSignals, Signal } from "../ConversationSignals.js"
import { LiveConnections } from "../LiveConnections.js"
import type { ClientSocket } from "../SocketEndpoints.js"
import { type FrameKind, SOCKET_LIMITS } from "../SocketLink.js"
import type { PhoenixDialect } from "./PhoenixDialect.js"
import { encodePhoenixMessage, parsePhoenixMessage, type PhoenixMessage, phoenixReply } from "./PhoenixMessage.js"

/** Activities the join (and `sync`) replays at most (client-api.md "Phoenix-binding join replay"). */
export const REPLAY_LIMIT = 100
/** The socket-level topic: heartbeats, the `auth` extension, and errors not tied to a push. */
const SOCKET_TOPIC = "phoenix"
/** `clientId`: 1 to 128 of A-Z a-z 0-9 . _ : ~ - (client-api.md "Sockets"); a linear check, no backtracking. */
const CLIENT_ID = /^[A-Za-z0-9._:~-]{1,128}$/
/** Pause before following again after the live feed failed without a delay of its own. */
const RESUME_AFTER_MS = 1000

type Response = Readonly<Record<string, unknown>>
type Reply = { readonly status: "ok" | "error"; readonly response: Response }
const ok = (response: Response = {}): Reply => ({ status: "ok", response })
const refused = (reason: string, extras: Response = {}): Reply => ({ status: "error", response: { reason, ...extras } })

/** The error reply of a client-visible error: its code as `reason`, with the delay or field errors where it has them. */
const refusedBy = (error: WireError & { readonly _tag: string }): Reply => {
  switch (error._tag) {
    case "InvalidMessage":
      return refused("invalid_activity", { errors: error.wireDetails ?? {} })
    case "RateLimited":
    case "Unavailable": {
      const details = error.wireDetails ?? {}
      return refused(error.code, { retry_after_ms: typeof details["retry_after_ms"] === "number" ? details["retry_after_ms"] : RESUME_AFTER_MS })
    }
    case "OutcomeUnknown":
      // The spec's reasons for a send: `unavailable`; the client re-sends with its clientId, stored at most once.
      return refused("unavailable", { retry_after_ms: RESUME_AFTER_MS })
    case "InsufficientPermission":
      return refused(error.code, { required: error.wireDetails?.["required"] ?? [] })
    default:
      return refused(error.code)
  }
}

/** What a socket has joined: a conversation it follows, or (null) a channel topic, pushed its channel's deliveries. */
interface Joined {
  readonly joinRef: string | null
  readonly conversationId: ConversationId | null
}

/**
 * The Phoenix-protocol binding's session, in the names of `dialect`: one per socket, its joined topics each
 * followed by a fiber of their own (activities from `ConversationHub`, signals from `ConversationSignals`,
 * a channel's deliveries from `ChannelFeed`).
 * Every malformed or refused frame is answered; nothing a client sends ends the session.
 */
export const makePhoenixSession = (dialect: PhoenixDialect) =>
  Effect.gen(function*() {
    const conversations = yield* Conversations
    const channels = yield* Channels
    const hub = yield* ConversationHub
    const channelFeed = yield* ChannelFeed
    const signals = yield* ConversationSignals
    const live = yield* LiveConnections
    const post = postActivity(conversations, yield* RateLimiter)

    return (socket: ClientSocket): Effect.Effect<void> =>
      Effect.scoped(Effect.gen(function*() {
        const { connection, link, query } = socket
        let principal: ClientPrincipal = socket.principal
        const joined = new Map<string, Joined>()
        const followers = yield* FiberMap.make<string>()
        /** Names this socket to the signals, so it does not hear its own typing and reads. */
        const origin = crypto.randomUUID()
        let inFlight = 0

        const send = (message: PhoenixMessage, kind: FrameKind = "persistent") => {
          link.send(encodePhoenixMessage(message), kind)
        }
        const reply = (to: PhoenixMessage, answer: Reply) => send(phoenixReply(to, answer.status, answer.response))
        const socketError = (response: Response) =>
          send({ joinRef: null, ref: null, topic: SOCKET_TOPIC, event: "error", payload: response })
        const scopeOf = (): ConversationScope => socketScopeOf(principal)
        const lacks = (permission: Permission) =>
          principal.permissions.includes(permission) ? undefined : refused("insufficient_permission", { required: [permission] })

        const sendActivities = (topic: string, at: Joined, activities: ReadonlyArray<Activity>, position: number | null, hasMore: boolean) => {
          for (const payload of dialect.activityPayloads(activities, position, hasMore)) {
            send({ joinRef: at.joinRef, ref: null, topic, event: dialect.activityEvent, payload })
          }
        }

        /** Up to `REPLAY_LIMIT` activities above `position` (any watermark form; an invalid one starts at the beginning). */
        const pageAfter = (conversationId: ConversationId, position: string | undefined) =>
          conversations.activities(
            scopeOf(),
            conversationId,
            { watermark: position, onInvalidWatermark: () => Effect.succeed(null), direction: "forward", before: null },
            REPLAY_LIMIT
          )

        /**
         * Follows the conversation from `from`: every activity above it once, in order; a feed failure is
         * told (`replay_unavailable`) and the feed resumed from the last activity sent.
         */
        const follow = (topic: string, at: Joined, conversationId: ConversationId, from: number) =>
          Effect.suspend(() => {
            let last = from
            const activities = Effect.suspend(() =>
              hub.subscribe(conversationId, last).pipe(
                Stream.chunks,
                Stream.runForEach((chunk) =>
                  Effect.sync(() => {
                    const fresh = Chunk.toReadonlyArray(chunk).filter((activity) => activity.seq > last)
                    for (let i = 0; i < fresh.length; i += REPLAY_LIMIT) {
                      const batch = fresh.slice(i, i + REPLAY_LIMIT)
                      last = batch[batch.length - 1]!.seq
                      sendActivities(topic, at, batch, last, false)
                    }
                  })
                ),
                Effect.zipRight(Effect.sleep(Duration.millis(RESUME_AFTER_MS))),
                Effect.catchTag("Unavailable", (error) => {
                  const retryAfterMs = error.retry_after_ms ?? RESUME_AFTER_MS
                  send({
                    joinRef: at.joinRef,
                    ref: null,
                    topic,
                    event: "error",
                    payload: { code: "replay_unavailable", watermark: dialect.watermarkOf(last), retry_after_ms: retryAfterMs }
                  })
                  return Effect.sleep(Duration.millis(retryAfterMs))
                })
              )
            )
            const signalled = signals.follow(conversationId).pipe(
              Stream.runForEach((signal) => Effect.sync(() => onSignal(topic, at, signal)))
            )
            const viewing = principal.userId === null ? Effect.void : signals.view(conversationId, principal.userId)
            // Who is here now: later changes arrive as signals.
            const present = Effect.flatMap(signals.viewers(conversationId), (viewers) =>
              Effect.sync(() => onSignal(topic, at, Signal.Presence({ viewers }))))
            return viewing.pipe(
              Effect.zipRight(present),
              Effect.zipRight(Effect.all([Effect.forever(activities), signalled], { concurrency: "unbounded", discard: true }))
            )
          }).pipe(Effect.scoped)

        const onSignal = (topic: string, at: Joined, signal: Signal) => {
          const event = (name: string, payload: Response, kind: FrameKind) =>
            send({ joinRef: at.joinRef, ref: null, topic, event: name, payload }, kind)
          switch (signal._tag) {
            case "Typing":
              if (signal.origin !== origin) event("typing", { userId: signal.userId }, "ephemeral")
              return
            case "Read":
              if (signal.origin !== origin) event(dialect.deliveryStatusEvent, dialect.deliveryStatus(signal.userId, signal.seq), "persistent")
              return
            case "Presence":
              event("presence", { viewers: signal.viewers }, "ephemeral")
              return
          }
        }

        /** Ends following `topic` (a rejoin replaces it; a leave ends it). */
        const unjoin = (topic: string) =>
          Effect.zipRight(
            FiberMap.remove(followers, topic),
            Effect.sync(() => {
              joined.delete(topic)
              connection.joined = joined.size > 0
            })
          )

        /** Takes the topic: an earlier join of it is closed and replaced (Phoenix semantics). */
        const take = (message: PhoenixMessage, at: Joined) =>
          Effect.gen(function*() {
            const previous = joined.get(message.topic)
            if (previous !== undefined) {
              yield* unjoin(message.topic)
              send({ joinRef: previous.joinRef, ref: null, topic: message.topic, event: "phx_close", payload: {} })
            }
            joined.set(message.topic, at)
            connection.joined = true
          })

        const joinConversation = (message: PhoenixMessage, rawId: string) =>
          Effect.gen(function*() {
            if (principal.kind === "unscoped") return reply(message, refused("forbidden"))
            if (principal.conversationId !== null && principal.conversationId !== rawId.toLowerCase()) {
              return reply(message, refused("forbidden"))
            }
            const missing = lacks("read")
            if (missing !== undefined) return reply(message, missing)
            if (!isUuid(rawId)) return reply(message, refused("not_found"))
            const conversationId = conversationIdOf(rawId)
            const queried = query.get("conversation_id")
            // The query's watermark is the position of the query's conversation (or of the only one joined).
            const fallback = queried === null || queried.toLowerCase() === conversationId ? query.get("watermark") ?? undefined : undefined
            const sent = message.payload[dialect.positionKey]
            const position = sent === undefined || sent === null ? dialect.positionOf(fallback) : dialect.positionOf(sent)
            const page = yield* Effect.either(pageAfter(conversationId, position))
            if (Either.isLeft(page)) return reply(message, refusedBy(page.left))
            const at: Joined = { joinRef: message.joinRef, conversationId }
            yield* take(message, at)
            reply(message, ok())
            const { hasMore, items, watermark } = page.right
            sendActivities(message.topic, at, items, watermark, hasMore)
            yield* FiberMap.run(followers, message.topic, follow(message.topic, at, conversationId, watermark ?? 0))
          })

        const joinChannel = (message: PhoenixMessage, rawId: string) =>
          Effect.gen(function*() {
            if (principal.kind !== "channel" || principal.channelId !== rawId.toLowerCase()) return reply(message, refused("forbidden"))
            const missing = lacks("read")
            if (missing !== undefined) return reply(message, missing)
            const channel = yield* Effect.either(channels.get(principal.tenantId, principal.channelId))
            if (Either.isLeft(channel)) return reply(message, refusedBy(channel.left))
            if (channel.right.type !== "websocket") return reply(message, refused("unsupported_channel_type"))
            const at: Joined = { joinRef: message.joinRef, conversationId: null }
            yield* take(message, at)
            yield* FiberMap.run(followers, message.topic, followChannel(message, at, channel.right.id))
          })

        /**
         * Pushes the channel's deliveries as they are handed over, in sets of at most `REPLAY_LIMIT`. The join
         * is answered once the node follows the channel's feed, so a delivery sent after the answer arrives.
         */
        const followChannel = (message: PhoenixMessage, at: Joined, channelId: string) =>
          Effect.scoped(Effect.gen(function*() {
            const delivered = yield* channelFeed.listen(channelId)
            reply(message, ok())
            yield* Stream.runForEach(Stream.chunks(delivered), (chunk) =>
              Effect.sync(() => {
                const activities = Chunk.toReadonlyArray(chunk)
                for (let i = 0; i < activities.length; i += REPLAY_LIMIT) {
                  // No watermark: a channel's deliveries span conversations and are not replayed.
                  sendActivities(message.topic, at, activities.slice(i, i + REPLAY_LIMIT), null, false)
                }
              }))
          }))

        const join = (message: PhoenixMessage) => {
          if (!joined.has(message.topic) && joined.size >= SOCKET_LIMITS.maxJoins) {
            return Effect.sync(() => reply(message, refused("too_many_joins")))
          }
          if (message.topic.startsWith(dialect.conversationTopic)) {
            return joinConversation(message, message.topic.slice(dialect.conversationTopic.length))
          }
          if (dialect.channelTopic !== null && message.topic.startsWith(dialect.channelTopic)) {
            return joinChannel(message, message.topic.slice(dialect.channelTopic.length))
          }
          return Effect.sync(() => reply(message, refused("unmatched_topic")))
        }

        /** `postActivity`: answered from a fiber of its own, so the socket keeps reading while it is stored. */
        const postOn = (message: PhoenixMessage, conversationId: ConversationId) =>
          Effect.gen(function*() {
            const missing = lacks("write")
            if (missing !== undefined) return reply(message, missing)
            const payload = message.payload
            const clientId = payload[dialect.clientIdKey]
            if (clientId !== undefined && (typeof clientId !== "string" || !CLIENT_ID.test(clientId))) {
              return reply(message, refused("invalid_activity", { errors: { [dialect.clientIdKey]: ["1 to 128 characters of A-Z a-z 0-9 . _ : ~ -"] } }))
            }
            if (inFlight >= SOCKET_LIMITS.maxInFlight) return reply(message, refused("too_many_in_flight"))
            // The token's user is the sender; `from.id` only for a token without one.
            const input = activityInputOf({
              type: payload["type"],
              text: payload["text"],
              attachments: payload["attachments"],
              channelData: payload["channelData"],
              replyToId: payload["replyToId"],
              from: principal.userId === null ? payload["from"] : { id: principal.userId }
            }, principal.userId)
            if (Either.isLeft(input)) return reply(message, refusedBy(input.left))
            const scope: ConversationScope = principal.conversationId === conversationId
              ? { tenantId: principal.tenantId, channelId: null }
              : scopeOf()
            inFlight++
            yield* post(scope, conversationId, input.right, clientId, Date.now()).pipe(
              Effect.match({
                onFailure: (error) => reply(message, refusedBy(error)),
                onSuccess: (activity) => reply(message, ok(dialect.postReply(activity)))
              }),
              Effect.ensuring(Effect.sync(() => {
                inFlight--
              })),
              Effect.forkScoped
            )
          })

        const positionSeq = (message: PhoenixMessage) => {
          const text = dialect.positionOf(message.payload[dialect.positionKey])
          const position = text === undefined ? undefined : decodeWatermark(text)
          return position !== undefined && Either.isRight(position) && position.right._tag === "Seq" ? position.right.seq : undefined
        }

        const onConversation = (message: PhoenixMessage, conversationId: ConversationId) => {
          switch (message.event) {
            case dialect.postEvent:
              return postOn(message, conversationId)
            case "typing": {
              const missing = lacks("typing")
              if (missing !== undefined) return Effect.sync(() => reply(message, missing))
              return Effect.zipRight(
                signals.typing(conversationId, principal.userId ?? "user", origin),
                Effect.sync(() => reply(message, ok()))
              )
            }
            case "read": {
              const missing = lacks("read")
              if (missing !== undefined) return Effect.sync(() => reply(message, missing))
              const seq = positionSeq(message)
              if (seq === undefined) return Effect.sync(() => reply(message, refused("invalid_watermark")))
              return signals.read(conversationId, principal.userId ?? "user", seq, origin).pipe(
                Effect.match({ onFailure: (error) => reply(message, refusedBy(error)), onSuccess: () => reply(message, ok()) })
              )
            }
            case "sync": {
              const missing = lacks("read")
              if (missing !== undefined) return Effect.sync(() => reply(message, missing))
              return pageAfter(conversationId, dialect.positionOf(message.payload[dialect.positionKey])).pipe(
                Effect.match({
                  onFailure: (error) => reply(message, refusedBy(error)),
                  onSuccess: (page) => {
                    const payloads = dialect.activityPayloads(page.items, page.watermark, page.hasMore)
                    reply(message, ok(dialect.binding === "phoenix" ? payloads[0]! : { activities: payloads, has_more: page.hasMore }))
                  }
                })
              )
            }
            default:
              return Effect.sync(() => reply(message, refused("unknown_event")))
          }
        }

        /** The in-band `auth` extension: a fresh token of the same subject replaces the socket's. */
        const auth = (message: PhoenixMessage) => {
          const token = message.payload["token"]
          if (typeof token !== "string" || token.length === 0) return Effect.sync(() => reply(message, refused("bad_request")))
          return live.refresh(connection, token).pipe(
            Effect.match({
              onFailure: (error) => reply(message, refusedBy(error)),
              onSuccess: (next) => {
                principal = next
                reply(message, ok())
              }
            })
          )
        }

        const onMessage = (message: PhoenixMessage): Effect.Effect<void, never, Scope.Scope> => {
          if (message.topic === SOCKET_TOPIC) {
            if (message.event === "heartbeat") return Effect.sync(() => reply(message, ok()))
            if (message.event === "auth") return auth(message)
            return Effect.sync(() => reply(message, refused("unknown_event")))
          }
          if (message.event === "phx_join") return join(message)
          const at = joined.get(message.topic)
          if (at === undefined) return Effect.sync(() => reply(message, refused("unmatched_topic")))
          if (message.event === "phx_leave") {
            return Effect.zipRight(
              unjoin(message.topic),
              Effect.sync(() => {
                reply(message, ok())
                send({ joinRef: at.joinRef, ref: null, topic: message.topic, event: "phx_close", payload: {} })
              })
            )
          }
          if (message.event === "auth") return auth(message)
          if (at.conversationId === null) return Effect.sync(() => reply(message, refused("unknown_event")))
          return onConversation(message, at.conversationId)
        }

        const onFrame = (data: Buffer, binary: boolean) => {
          if (binary) return Effect.sync(() => socketError({ reason: "binary_not_supported" }))
          const parsed = parsePhoenixMessage(data.toString("utf8"))
          if (Either.isRight(parsed)) return onMessage(parsed.right)
          const malformed = parsed.left
          return Effect.sync(() =>
            malformed.ref !== null && malformed.topic !== null
              ? reply({ joinRef: malformed.joinRef, ref: malformed.ref, topic: malformed.topic, event: "", payload: {} }, refused(malformed.reason))
              : socketError({ reason: malformed.reason })
          )
        }

        yield* Queue.take(link.inbound).pipe(
          Effect.flatMap((item) => {
            switch (item._tag) {
              case "Frame":
                return onFrame(item.data, item.binary)
              case "TooLarge":
                return Effect.sync(() => socketError({ reason: "payload_too_large" }))
              case "RateLimited":
                return Effect.sync(() => socketError({ reason: "rate_limited", retry_after_ms: item.retryAfterMs }))
            }
          }),
          Effect.forever
        )
      }))
  })
