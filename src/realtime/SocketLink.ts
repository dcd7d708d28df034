import { Deferred, Effect, Queue, type Scope } from "effect"
import type { RawData, WebSocket } from "ws"
import type { Binding } from "./RealtimeMetrics.js"
import { RealtimeMetrics } from "./RealtimeMetrics.js"

/** client-api.md "Per-socket limits", the same on every binding. */
export const SOCKET_LIMITS = {
  /** A larger frame is not processed: error `payload_too_large`, the socket stays open. */
  maxFrameBytes: 128 * 1024,
  /** A larger frame closes the socket with 1009 (the `ws` library's own `maxPayload` check). */
  hardCapBytes: 1024 * 1024,
  /** Inbound frames per window, heartbeats and joins included; more are answered `rate_limited`. */
  framesPerWindow: 20,
  windowMs: 1000,
  /** Topics one Phoenix socket may have joined at once. */
  maxJoins: 50,
  /** Sends not yet answered, per socket. */
  maxInFlight: 32,
  /** Frames written but not yet flushed to the network: one more persistent frame closes with 4503. */
  outboundBacklog: 1000,
  /** With this many unflushed frames, typing and presence frames are dropped. */
  ephemeralBacklog: 100
} as const

/** What the client sent, after the size and rate checks. */
export type Inbound =
  | { readonly _tag: "Frame"; readonly data: Buffer; readonly binary: boolean }
  | { readonly _tag: "TooLarge"; readonly bytes: number }
  | { readonly _tag: "RateLimited"; readonly retryAfterMs: number }

/**
 * How a frame counts against the backlog: activities and replies are `persistent` (one too many closes
 * the socket), typing and presence are `ephemeral` (dropped when the client lags).
 */
export type FrameKind = "persistent" | "ephemeral"

/** How a socket ended: the close code and reason, whichever side closed it. */
export interface SocketClosed {
  readonly code: number
  readonly reason: string
}

/** How long a closing socket waits for the peer's close frame before it is cut. */
const CLOSE_GRACE_MS = 5000

/** A reconnect delay for 1012 and 4503: one second plus up to four of jitter (client-api.md "Socket close codes"). */
export const reconnectDelayMs = () => 1000 + Math.floor(Math.random() * 4000)

/**
 * One accepted WebSocket with the per-socket limits applied: inbound frames are checked for size
 * and rate and queued in order; outbound frames are counted until flushed, so a client that stops
 * reading is found by what it has not taken, not by a count that never drains.
 */
export interface SocketLink {
  readonly binding: Binding
  /** Frames and violations, in arrival order. */
  readonly inbound: Queue.Dequeue<Inbound>
  /** The negotiated subprotocol ("" when none). */
  readonly protocol: string
  /** Epoch ms of the last frame the client sent (for the idle timeout). */
  readonly lastInboundAt: () => number
  /** Frames written but not yet flushed. */
  readonly unflushed: () => number
  /** Writes a frame; false when it was dropped (ephemeral over its backlog) or the socket is closing. */
  readonly send: (data: string | Uint8Array, kind: FrameKind) => boolean
  /** Closes with `code` and `reason` (at most 123 bytes); later calls do nothing. */
  readonly close: (code: number, reason?: string) => void
  /** Completes when the socket has closed, with its code and reason. */
  readonly closed: Deferred.Deferred<SocketClosed>
}

/** Wraps an accepted `ws` socket; the socket is closed (1001) when the scope closes first. */
export const makeSocketLink = (ws: WebSocket, binding: Binding): Effect.Effect<SocketLink, never, Scope.Scope | RealtimeMetrics> =>
  Effect.gen(function*() {
    const metrics = yield* RealtimeMetrics
    const inbound = yield* Queue.unbounded<Inbound>()
    const closed = yield* Deferred.make<SocketClosed>()
    let lastInboundAt = Date.now()
    let unflushed = 0
    let closing = false
    let windowStart = 0
    let windowFrames = 0

    const sent = () => {
      unflushed--
    }
    const close = (code: number, reason = "") => {
      if (closing) return
      closing = true
      metrics.closedWith(binding, code)
      ws.close(code, reason)
      // `ws` waits 30 s for the peer's close frame: a half-open or stalled peer would hold the socket that long.
      setTimeout(() => ws.terminate(), CLOSE_GRACE_MS).unref()
    }
    const slowConsumer = () =>
      close(4503, JSON.stringify({ reason: "slow_consumer", retryAfterMs: reconnectDelayMs() }))

    const send = (data: string | Uint8Array, kind: FrameKind) => {
      if (closing || ws.readyState !== ws.OPEN) return false
      if (kind === "ephemeral" && unflushed >= SOCKET_LIMITS.ephemeralBacklog) {
        metrics.droppedEphemeral(binding)
        return false
      }
      if (unflushed >= SOCKET_LIMITS.outboundBacklog) {
        slowConsumer()
        return false
      }
      unflushed++
      metrics.frameOut(binding)
      ws.send(data, { binary: typeof data !== "string" }, sent)
      return true
    }

    /** Counts the frame in the socket's window; the first one over the limit is answered, the rest dropped. */
    const admit = (now: number): Inbound | "drop" | undefined => {
      if (now - windowStart >= SOCKET_LIMITS.windowMs) {
        windowStart = now
        windowFrames = 0
      }
      windowFrames++
      if (windowFrames <= SOCKET_LIMITS.framesPerWindow) return undefined
      return windowFrames === SOCKET_LIMITS.framesPerWindow + 1
        ? { _tag: "RateLimited", retryAfterMs: Math.max(1, windowStart + SOCKET_LIMITS.windowMs - now) }
        : "drop"
    }

    ws.on("message", (raw: RawData, binary: boolean) => {
      const now = Date.now()
      lastInboundAt = now
      metrics.frameIn(binding)
      const data = Array.isArray(raw) ? Buffer.concat(raw) : Buffer.isBuffer(raw) ? raw : Buffer.from(raw)
      const refused = admit(now)
      if (refused === "drop") return
      Queue.unsafeOffer(
        inbound,
        refused ?? (data.byteLength > SOCKET_LIMITS.maxFrameBytes ? { _tag: "TooLarge", bytes: data.byteLength } : { _tag: "Frame", data, binary })
      )
    })
    ws.on("close", (code: number, reason: Buffer) => {
      closing = true
      Deferred.unsafeDone(closed, Effect.succeed({ code, reason: reason.toString("utf8") }))
    })
    // A socket error is followed by its close; without a listener `ws` would throw it.
    ws.on("error", () => undefined)
    yield* Effect.addFinalizer(() => Effect.sync(() => close(1001)))

    return {
      binding,
      inbound,
      protocol: ws.protocol,
      lastInboundAt: () => lastInboundAt,
      unflushed: () => unflushed,
      send,
      close,
      closed
    } satisfies SocketLink
  })
