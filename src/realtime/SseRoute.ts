import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Chunk, type Context, Deferred, Duration, Effect, Either, Schema, type Scope, Sink, Stream } from "effect"
import type { ServerResponse } from "node:http"
import { CurrentClient, requireConversationBinding, requirePermission } from "../auth/ClientAccess.js"
import { ClientTokens } from "../auth/ClientTokens.js"
import { AppConfig } from "../config/AppConfig.js"
import { Conversations } from "../conversations/Conversations.js"
import type { Activity } from "../domain/Activity.js"
import { BadRequest, Unauthorized, type Unavailable } from "../domain/ApiError.js"
import { ConversationId } from "../domain/Conversation.js"
import { bearerCredential } from "../http/BearerCredential.js"
import { frameOf } from "../http/ClientActivityWire.js"
import { DeprecationWarnings } from "../http/DeprecationWarnings.js"
import { noteOpaqueWatermark } from "../http/OpaqueWatermark.js"
import type { RouteSpec } from "../http/RouteTable.js"
import { ConversationHub } from "./ConversationHub.js"
import { ConversationSignals } from "./ConversationSignals.js"
import { type Ending, type LiveConnection, LiveConnections } from "./LiveConnections.js"
import { errorFrame, heartbeatFrame, type ProtocolFrame, replayTruncatedFrame, signalFrame } from "./ProtocolFrames.js"
import { RealtimeMetrics } from "./RealtimeMetrics.js"
import { reconnectDelayMs } from "./SocketLink.js"

/** The event stream of one conversation (client-api.md "GET …/events"). */
export const SSE_PATH = "/api/v1/chat/conversations/:conversation_id/events"

/** The event stream route, for the route table. */
export const sseRoutes: ReadonlyArray<RouteSpec> = [{ method: "GET", path: SSE_PATH }]

/** Frames one connection replays before `replayTruncated` (client-api.md "Size and paging limits"). */
export const SSE_REPLAY_LIMIT = 10_000

/** The reconnect delay announced first, in ms (client-api.md: the stream starts with `retry: 3000`). */
const RETRY_MS = 3000

/**
 * After an ending's error event is written, how long the response may take to flush it before its
 * socket is destroyed: a client that reads nothing must not hold the node's close.
 */
const END_GRACE_MS = 2000

/** Retry delay after the hub fails when its error names none. */
const HUB_RETRY_MS = 1000

const encoder = new TextEncoder()

/**
 * One SSE event. The name is the frame type without line breaks (a line break would end the field);
 * JSON has none in `data`, so one `data` line carries the whole frame.
 */
const eventOf = (frame: ProtocolFrame, id?: number) =>
  encoder.encode(
    `event: ${frame.type.replace(/[\r\n]/g, "")}\n${id === undefined ? "" : `id: ${id}\n`}data: ${JSON.stringify(frame)}\n\n`
  )

/** The error event that ends a stream the node ends (LiveConnections), and its code. */
const endingFrame = (ending: Ending): ProtocolFrame => {
  switch (ending._tag) {
    case "Revoked":
      return errorFrame("token_revoked", "the token was revoked")
    case "Expired":
      return errorFrame("token_expired", "the token expired; reconnect with a fresh one")
    case "ChannelInactive":
      return errorFrame("channel_inactive", "the channel of this token is inactive")
    case "Draining":
      return errorFrame("unavailable", "this node shuts down; reconnect", { retryAfterMs: ending.retryAfterMs })
    // Streams have no idle timeout (they only listen); ended as a shutdown would be if one came.
    case "Idle":
      return errorFrame("unavailable", "the stream was idle", { retryAfterMs: reconnectDelayMs() })
  }
}

const conversationPath = HttpLayerRouter.schemaPathParams(Schema.Struct({ conversation_id: ConversationId })).pipe(
  Effect.mapError(() => new BadRequest({ message: "malformed conversation id" }))
)

/**
 * `GET /api/v1/chat/conversations/:conversation_id/events`: authenticated, admitted and resolved
 * before the stream starts (errors are envelopes), then `retry`, the replay from the resume position
 * (capped), live activities through the hub, signals and heartbeats, until the client leaves or the
 * node ends the stream with an error event.
 */
export const SseRoute = HttpLayerRouter.addAll(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const tokens = yield* ClientTokens
    const conversations = yield* Conversations
    const hub = yield* ConversationHub
    const signals = yield* ConversationSignals
    const live = yield* LiveConnections
    const metrics = yield* RealtimeMetrics
    const warnings = yield* DeprecationWarnings

    const handler = Effect.gen(function*() {
      const request = yield* HttpServerRequest.HttpServerRequest
      yield* live.admit
      const params = new URL(request.url, "http://node").searchParams
      const { conversation_id: id } = yield* conversationPath
      // The header wins; EventSource cannot set one, hence `?token=` (kept out of every log line).
      const token = bearerCredential(request) ?? params.get("token") ?? undefined
      if (token === undefined || token === "") {
        return yield* new Unauthorized({ message: "missing token: send Authorization: Bearer or ?token=" })
      }
      const client = yield* tokens.authenticate(token)
      yield* Effect.zipRight(requireConversationBinding(id), requirePermission("read")).pipe(Effect.provideService(CurrentClient, client))
      yield* conversations.get({ tenantId: client.tenantId, channelId: client.channelId }, id, { channels: false })
      const head = yield* conversations.headOf(id)

      // Last-Event-ID wins over ?watermark=; an empty header (EventSource after no id) is none.
      const lastEventId = request.headers["last-event-id"]
      const watermark = lastEventId !== undefined && lastEventId !== "" ? lastEventId : params.get("watermark") ?? undefined
      yield* noteOpaqueWatermark(warnings, watermark, client.channelId)
      // An invalid watermark is not an error: the stream starts at the beginning, as the list does.
      const resolved = watermark === undefined ? Either.right(0) : yield* conversations.watermarkSeq(id, watermark)
      const from = Either.getOrElse(resolved, () => 0)

      const viewer = client.userId ?? params.get("userId") ?? null
      const response = NodeHttpServerRequest.toServerResponse(request)
      const body = eventStream({
        id,
        from,
        head,
        viewer,
        identified: client.userId,
        claims: client.claims,
        response,
        heartbeatMs: config.sseHeartbeatMs,
        hub,
        signals,
        live,
        metrics
      })
      return HttpServerResponse.stream(body, {
        contentType: "text/event-stream",
        // The stream is the connection's last answer: kept alive once it ends, the idle connection
        // would hold the server's close for its keep-alive timeout (seconds, measured) during a drain.
        headers: { "cache-control": "no-cache", "x-accel-buffering": "no", connection: "close" }
      })
    })
    return [HttpLayerRouter.route("GET", SSE_PATH, handler)]
  })
)

interface StreamOptions {
  readonly id: ConversationId
  /** The seq the client has; every activity above it is sent. */
  readonly from: number
  /** The conversation's head when the stream was asked for. */
  readonly head: number
  /** Whose activities are `from: user`. */
  readonly viewer: string | null
  /** The token's end user, counted as a viewer while the stream is open. */
  readonly identified: string | null
  readonly claims: LiveConnection["claims"]
  readonly response: ServerResponse
  readonly heartbeatMs: number
  readonly hub: ConversationHub
  readonly signals: Context.Tag.Service<typeof ConversationSignals>
  readonly live: LiveConnections
  readonly metrics: RealtimeMetrics
}

/** The events of an admitted stream, its resources held for as long as it is read. */
const eventStream = (options: StreamOptions): Stream.Stream<Uint8Array> =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const { head, hub, id, metrics, response, signals, viewer } = options
    const event = (frame: ProtocolFrame, seq?: number) => {
      metrics.frameOut("sse")
      return eventOf(frame, seq)
    }
    const final = yield* Deferred.make<ProtocolFrame>()
    let finished = false
    const finish = (frame: ProtocolFrame) => {
      if (finished) return
      finished = true
      Deferred.unsafeDone(final, Effect.succeed(frame))
      // A client that reads nothing never takes the last event: its socket goes, so the node can close.
      setTimeout(() => {
        if (!response.writableFinished) response.destroy()
      }, END_GRACE_MS).unref()
    }
    const connection: LiveConnection = { binding: "sse", claims: options.claims, joined: true, end: (ending) => finish(endingFrame(ending)) }
    yield* options.live.register(connection)
    // Admitted before the drain began, registered after its sweep took its list: ended now.
    yield* options.live.admit.pipe(
      Effect.catchTag("Unavailable", (error) =>
        Effect.sync(() => finish(errorFrame("unavailable", "this node shuts down; reconnect", { retryAfterMs: error.retry_after_ms ?? reconnectDelayMs() }))))
    )
    if (options.identified !== null) yield* signals.view(id, options.identified)
    yield* watchConsumer(response, options.heartbeatMs, finish)

    // The highest seq the client is sent (or, after a truncated replay, was told to page up to).
    let last = options.from
    let known = head
    const activityEvent = (activity: Activity) => {
      last = activity.seq
      known = Math.max(known, activity.seq)
      return event(frameOf(activity, viewer), activity.seq)
    }

    /** Activities from `last` on as `open` gives them; a hub failure is told, waited out and resumed from `last`. */
    const resilient = (open: () => Stream.Stream<Activity, Unavailable>): Stream.Stream<Uint8Array> =>
      Stream.suspend(open).pipe(
        Stream.map(activityEvent),
        Stream.catchAll((error) => {
          const retryAfterMs = error.retry_after_ms ?? HUB_RETRY_MS
          return Stream.concat(
            Stream.sync(() =>
              event(errorFrame("replay_unavailable", "the conversation cannot be read now; retrying", {
                details: { watermark: last },
                retryAfterMs
              }))
            ),
            Stream.fromEffect(Effect.sleep(Duration.millis(retryAfterMs))).pipe(Stream.drain, Stream.concat(resilient(open)))
          )
        })
      )
    const follow = resilient(() => hub.subscribe(id, last))

    const activities: Stream.Stream<Uint8Array> = options.from > head
      ? Stream.concat(
        Stream.sync(() => {
          last = head
          return event(errorFrame("invalid_watermark", "the watermark is above the conversation's head; continuing live", {
            details: { watermark: head }
          }))
        }),
        follow
      )
      : head - options.from > SSE_REPLAY_LIMIT
      ? Stream.concat(
        resilient(() => hub.subscribe(id, last).pipe(Stream.take(options.from + SSE_REPLAY_LIMIT - last))),
        Stream.sync(() => {
          const frame = replayTruncatedFrame(last)
          // The rest up to the head is paged over REST; live from the head on.
          last = head
          return event(frame)
        })
      ).pipe(Stream.concat(follow))
      : follow

    const signalEvents = signals.follow(id).pipe(
      // Ephemeral: dropped while the client has not taken what was written before.
      Stream.filter(() => {
        if (!response.writableNeedDrain) return true
        metrics.droppedEphemeral("sse")
        return false
      }),
      Stream.map((signal) => event(signalFrame(signal, viewer)))
    )
    const heartbeats = Stream.tick(Duration.millis(options.heartbeatMs)).pipe(
      Stream.drop(1),
      Stream.map(() => event(heartbeatFrame(known)))
    )

    const events = Stream.mergeAll([activities, signalEvents, heartbeats], { concurrency: 3 }).pipe(
      Stream.interruptWhen(Deferred.await(final)),
      Stream.concat(Stream.fromEffect(Effect.map(Deferred.await(final), (frame) => event(frame))))
    )
    return batched(Stream.concat(Stream.sync(() => encoder.encode(`retry: ${RETRY_MS}\n\n`)), events))
  }))

/** Bytes of events joined into one write while the response is busy (a single larger event goes alone). */
const BATCH_BYTES = 64 * 1024

/**
 * Joins the events that arrive while the response waits for its socket into one write, so a replay
 * is written a batch at a time rather than an event at a time. Nothing waits for a batch to fill: an
 * idle response takes each event as it comes.
 */
const batched = <E>(events: Stream.Stream<Uint8Array, E>): Stream.Stream<Uint8Array, E> =>
  events.pipe(
    Stream.aggregate(Sink.foldWeighted({
      initial: Chunk.empty<Uint8Array>(),
      maxCost: BATCH_BYTES,
      cost: (_, bytes) => bytes.byteLength,
      body: (batch, bytes) => Chunk.append(batch, bytes)
    })),
    Stream.map((batch) => Chunk.size(batch) === 1 ? Chunk.unsafeHead(batch) : Buffer.concat(Chunk.toReadonlyArray(batch)))
  )

/**
 * Ends the stream with `slow_consumer` when the client took nothing for a whole heartbeat interval
 * while the response's write buffer was full: what it does not read is not kept for it.
 */
const watchConsumer = (response: ServerResponse, everyMs: number, finish: (frame: ProtocolFrame) => void): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function*() {
    let drains = 0
    const onDrain = () => {
      drains++
    }
    response.on("drain", onDrain)
    yield* Effect.addFinalizer(() => Effect.sync(() => response.off("drain", onDrain)))
    let stuckSince: number | null = null
    const check = Effect.sync(() => {
      if (!response.writableNeedDrain) {
        stuckSince = null
        return
      }
      if (stuckSince === drains) {
        finish(errorFrame("slow_consumer", "the client does not read the stream; reconnect", { retryAfterMs: reconnectDelayMs() }))
      }
      stuckSince = drains
    })
    yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sleep(Duration.millis(everyMs)), check)))
  })
