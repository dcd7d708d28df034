import { Duration, Effect, Either, Queue, type Scope, Stream } from "effect"
import { type ClientPrincipal, socketScopeOf } from "../../auth/ClientAccess.js"
import { AppConfig } from "../../config/AppConfig.js"
import { ActivityRepo } from "../../conversations/ActivityRepo.js"
import { Conversations, type ConversationScope } from "../../conversations/Conversations.js"
import { postActivity } from "../../conversations/PostActivity.js"
import { databaseUnavailable, jitteredRetryAfterMs, UnsupportedProtocol, type WireError } from "../../domain/ApiError.js"
import { type ConversationId, conversationIdOf } from "../../domain/Conversation.js"
import { isUuid } from "../../domain/Uuid.js"
import { decodeWatermark } from "../../domain/Watermark.js"
import { activityInputOf, frameOf } from "../../http/ClientActivityWire.js"
import { RateLimiter } from "../../ratelimit/RateLimiter.js"
import { ConversationHub } from "../ConversationHub.js"
import { ConversationSignals } from "../ConversationSignals.js"
import { LiveConnections } from "../LiveConnections.js"
import { errorFrame, heartbeatFrame, signalFrame } from "../ProtocolFrames.js"
import type { ClientSocket, SocketBinding } from "../SocketEndpoints.js"
import { type FrameKind, type Inbound, SOCKET_LIMITS } from "../SocketLink.js"
import {
  ackFrame,
  authOkFrame,
  type ClientFrame,
  decodeClientFrame,
  encodeServerFrame,
  formatOf,
  type FrameRefusal,
  pongFrame,
  SUPPORTED_PROTOCOLS,
  welcomeFrame
} from "./NativeCodec.js"

/**
 * Stored frames of a replay wait while this many frames are unflushed: a client that reads is not
 * closed as a slow consumer for a long history (live frames do not wait: one that stops reading is).
 */
const REPLAY_PAUSE_AT = SOCKET_LIMITS.outboundBacklog / 2
const REPLAY_POLL = Duration.millis(5)

/** A hello refused for the conversation it names (or the token's rights on it) closes with this. */
const POLICY_VIOLATION = 1008
/** A hello answered `unavailable` (the database is down) closes with this (client-api.md "Socket close codes"). */
const TRY_AGAIN_LATER = 1013

/** The subprotocol taken: the first the client offers that the endpoint speaks; none offered is JSON (`chat.v1`). */
const protocol = (offered: ReadonlyArray<string>): Either.Either<string, UnsupportedProtocol> => {
  if (offered.length === 0) return Either.right("")
  const taken = offered.find((p) => (SUPPORTED_PROTOCOLS as ReadonlyArray<string>).includes(p))
  return taken !== undefined
    ? Either.right(taken)
    : Either.left(new UnsupportedProtocol({ message: "none of the offered subprotocols is supported", supported: [...SUPPORTED_PROTOCOLS] }))
}

/** An error frame of a client-visible error; `retry_after_ms` of its details becomes `retryAfterMs`. */
const frameOfError = (error: WireError, clientId?: string) => {
  const details = error.wireDetails ?? undefined
  const retry = details?.["retry_after_ms"]
  return errorFrame(error.code, error.message, {
    ...(typeof retry === "number" ? { retryAfterMs: retry } : {}),
    ...(clientId === undefined ? {} : { clientId }),
    ...(details === undefined ? {} : { details })
  })
}

const frameOfRefusal = (refusal: FrameRefusal) =>
  errorFrame(refusal.code, refusal.message, {
    ...(refusal.clientId === undefined ? {} : { clientId: refusal.clientId }),
    ...(refusal.details === undefined ? {} : { details: refusal.details })
  })

/** Where a client appends: as the REST route does (a bound token's own conversation needs no channel look-up). */
const appendScopeOf = (client: ClientPrincipal, id: ConversationId): ConversationScope =>
  client.conversationId === id ? { tenantId: client.tenantId, channelId: null } : socketScopeOf(client)

/** A hello refused: the error frame, then the close. */
interface Refused {
  readonly frame: ReturnType<typeof errorFrame>
  readonly code: number
}
const refusedFor = (code: number) => (error: WireError): Refused => ({ frame: frameOfError(error), code })

/** The native Protocol v1 socket at `/socket/chat/v1` (CONTRACT.md §5, docs/realtime/native.md). */
export const makeNativeBinding = Effect.gen(function*() {
  const config = yield* AppConfig
  const conversations = yield* Conversations
  const post = postActivity(conversations, yield* RateLimiter)
  const hub = yield* ConversationHub
  const signals = yield* ConversationSignals
  const live = yield* LiveConnections
  const activityRepo = yield* ActivityRepo

  const serve = (socket: ClientSocket): Effect.Effect<void> =>
    Effect.scoped(Effect.gen(function*() {
      const { connection, link, query } = socket
      const format = formatOf(link.protocol)
      const origin = crypto.randomUUID()
      let principal = socket.principal
      let conversationId: ConversationId | undefined
      let inFlight = 0
      /** The highest seq sent (the heartbeat's `headSeq`, and where a failed replay resumes). */
      let delivered = 0

      const emit = (frame: object, kind: FrameKind = "persistent") => link.send(encodeServerFrame(format, frame), kind)
      const refuse = (refused: Refused) =>
        Effect.sync(() => {
          emit(refused.frame)
          const retry = refused.frame["retryAfterMs"]
          link.close(
            refused.code,
            JSON.stringify({ reason: refused.frame["code"], ...(typeof retry === "number" ? { retryAfterMs: retry } : {}) })
          )
        })
      const viewer = () => principal.userId
      const userOf = () => principal.userId ?? "user"
      const lacks = (permission: "read" | "write" | "typing") => !principal.permissions.includes(permission)
      const lacking = (permission: string, clientId?: string) =>
        errorFrame("insufficient_permission", `this token lacks the ${permission} permission`, {
          details: { required: [permission] },
          ...(clientId === undefined ? {} : { clientId })
        })

      /** The conversation the socket is for, checked against the token as the REST routes check it. */
      const conversationOf = Effect.gen(function*() {
        const named = query.get("conversation_id")
        if (principal.conversationId !== null) {
          if (named !== null && named.toLowerCase() !== principal.conversationId) {
            return yield* Effect.fail<Refused>({
              frame: errorFrame("forbidden", "this token is bound to another conversation"),
              code: POLICY_VIOLATION
            })
          }
          return principal.conversationId
        }
        if (named === null || !isUuid(named)) {
          return yield* Effect.fail<Refused>({
            frame: errorFrame("bad_request", "conversation_id must be a conversation's UUID (or use a conversation-bound token)"),
            code: POLICY_VIOLATION
          })
        }
        return conversationIdOf(named)
      })

      /** The seq to replay from: absent or invalid is the beginning; the legacy id form is looked up. */
      const fromSeqOf = (id: ConversationId, watermark: unknown) =>
        Either.match(watermark === undefined ? Either.left("absent") : decodeWatermark(watermark), {
          onLeft: () => Effect.succeed(0),
          onRight: (position) =>
            position._tag === "Seq"
              ? Effect.succeed(position.seq)
              : activityRepo.findExisting(principal.tenantId, id, [position.id], []).pipe(
                Effect.map((found) => found[0]?.seq ?? 0),
                Effect.mapError(databaseUnavailable)
              )
        })

      const waitForFlush = (): Effect.Effect<void> =>
        Effect.suspend(() => link.unflushed() < REPLAY_PAUSE_AT ? Effect.void : Effect.zipRight(Effect.sleep(REPLAY_POLL), waitForFlush()))

      /**
       * Every activity above `fromSeq`, stored then live, as frames. A failed read (the database) is an
       * error frame `replay_unavailable` with the last watermark; the socket stays open and resumes there.
       */
      const follow = (id: ConversationId, replayUpTo: number) =>
        Effect.suspend(() =>
          hub.subscribe(id, delivered).pipe(
            Stream.runForEach((activity) =>
              Effect.zipRight(
                activity.seq <= replayUpTo ? waitForFlush() : Effect.void,
                Effect.sync(() => {
                  delivered = activity.seq
                  emit(frameOf(activity, viewer()))
                })
              )
            ),
            Effect.catchAll((error) => {
              const retryAfterMs = error.retry_after_ms ?? jitteredRetryAfterMs()
              emit(errorFrame("replay_unavailable", "the conversation's activities cannot be read now; resuming", {
                retryAfterMs,
                details: { watermark: delivered }
              }))
              return Effect.sleep(Duration.millis(retryAfterMs))
            })
          )
        ).pipe(Effect.forever)

      const hello = (frame: Extract<ClientFrame, { type: "hello" }>) =>
        Effect.gen(function*() {
          const id = yield* conversationOf
          if (lacks("read")) return yield* Effect.fail<Refused>({ frame: lacking("read"), code: POLICY_VIOLATION })
          yield* conversations.get(socketScopeOf(principal), id, { channels: false }).pipe(
            Effect.mapError(refusedFor(POLICY_VIOLATION)),
            Effect.catchIf((refused) => refused.frame["code"] === "unavailable", (refused) => Effect.fail({ ...refused, code: TRY_AGAIN_LATER }))
          )
          const unavailable = (error: WireError) => refusedFor(TRY_AGAIN_LATER)(error)
          const headSeq = yield* activityRepo.headOf(id).pipe(Effect.mapError(() => unavailable(databaseUnavailable())))
          const asked = yield* fromSeqOf(id, frame.watermark).pipe(Effect.mapError(unavailable))
          conversationId = id
          connection.joined = true
          emit(welcomeFrame({
            conversationId: id,
            headSeq,
            heartbeatIntervalMs: config.sseHeartbeatMs,
            limits: { maxInFlight: SOCKET_LIMITS.maxInFlight, maxFrameBytes: SOCKET_LIMITS.maxFrameBytes }
          }))
          if (asked > headSeq) {
            emit(errorFrame("invalid_watermark", "the watermark is above the conversation's head; continuing live", {
              details: { watermark: headSeq }
            }))
          }
          delivered = Math.min(asked, headSeq)
          if (principal.userId !== null) yield* signals.view(id, principal.userId)
          yield* follow(id, headSeq).pipe(Effect.forkScoped)
          yield* signals.follow(id).pipe(
            Stream.filter((signal) => signal._tag === "Presence" || signal.origin !== origin),
            Stream.runForEach((signal) => Effect.sync(() => emit(signalFrame(signal, viewer()), "ephemeral"))),
            Effect.forkScoped
          )
          yield* Effect.sync(() => emit(heartbeatFrame(delivered), "ephemeral")).pipe(
            Effect.delay(Duration.millis(config.sseHeartbeatMs)),
            Effect.forever,
            Effect.forkScoped
          )
        }).pipe(Effect.catchAll(refuse))

      const send = (frame: Extract<ClientFrame, { type: "send" }>) =>
        Effect.suspend(() => {
          const { clientId } = frame
          const id = conversationId
          if (id === undefined) return Effect.sync(() => emit(errorFrame("bad_request", "send hello first", { clientId })))
          if (inFlight >= SOCKET_LIMITS.maxInFlight) {
            return Effect.sync(() =>
              emit(errorFrame("too_many_in_flight", `at most ${SOCKET_LIMITS.maxInFlight} sends may wait for their answer; retry with the same clientId`, { clientId }))
            )
          }
          if (lacks("write")) return Effect.sync(() => emit(lacking("write", clientId)))
          const { activity } = frame
          const input = activityInputOf({
            type: activity["type"],
            text: activity["text"],
            attachments: activity["attachments"],
            channelData: activity["channelData"],
            replyToId: activity["replyToId"],
            messageType: activity["messageType"],
            payload: activity["payload"]
          }, principal.userId)
          if (Either.isLeft(input)) return Effect.sync(() => emit(frameOfError(input.left, clientId)))
          inFlight++
          return post(appendScopeOf(principal, id), id, input.right, clientId, Date.now()).pipe(
            Effect.match({
              onFailure: (error) => frameOfError(error, clientId),
              onSuccess: (stored) => ackFrame(clientId, stored.id, stored.seq)
            }),
            Effect.flatMap((answer) => Effect.sync(() => emit(answer))),
            Effect.ensuring(Effect.sync(() => inFlight--)),
            Effect.forkScoped,
            Effect.asVoid
          )
        })

      const onFrame = (frame: ClientFrame): Effect.Effect<void, never, Scope.Scope> => {
        switch (frame.type) {
          case "ping":
            return Effect.sync(() => emit(pongFrame()))
          case "auth":
            return live.refresh(connection, frame.token).pipe(
              Effect.match({
                onFailure: (error) => frameOfError(error),
                onSuccess: (next) => {
                  principal = next
                  return authOkFrame(next.claims.exp * 1000)
                }
              }),
              Effect.flatMap((answer) => Effect.sync(() => emit(answer)))
            )
          case "hello":
            return conversationId !== undefined
              ? Effect.sync(() => emit(errorFrame("bad_request", "hello was said already")))
              : hello(frame)
          case "send":
            return send(frame)
          case "typing":
            return Effect.suspend(() => {
              const id = conversationId
              if (id === undefined) return Effect.sync(() => emit(errorFrame("bad_request", "send hello first")))
              if (lacks("typing")) return Effect.sync(() => emit(lacking("typing")))
              return signals.typing(id, userOf(), origin)
            })
          case "read":
            return Effect.suspend(() => {
              const id = conversationId
              if (id === undefined) return Effect.sync(() => emit(errorFrame("bad_request", "send hello first")))
              return signals.read(id, userOf(), frame.seq, origin).pipe(
                Effect.catchAll((error) => Effect.sync(() => emit(frameOfError(error))))
              )
            })
        }
      }

      const onInbound = (item: Inbound) => {
        switch (item._tag) {
          case "TooLarge":
            return Effect.sync(() =>
              emit(errorFrame("payload_too_large", `a frame is at most ${SOCKET_LIMITS.maxFrameBytes} bytes`, {
                details: { max_bytes: SOCKET_LIMITS.maxFrameBytes }
              }))
            )
          case "RateLimited":
            return Effect.sync(() =>
              emit(errorFrame("rate_limited", `at most ${SOCKET_LIMITS.framesPerWindow} frames per second`, { retryAfterMs: item.retryAfterMs }))
            )
          case "Frame":
            return Either.match(decodeClientFrame(format, item.data, item.binary), {
              onLeft: (refusal) => Effect.sync(() => emit(frameOfRefusal(refusal))),
              onRight: onFrame
            })
        }
      }

      return yield* Queue.take(link.inbound).pipe(Effect.flatMap(onInbound), Effect.forever)
    }))

  return { name: "native", protocol, serve } satisfies SocketBinding
})
