import { Data, Duration, Effect, type Scope, Stream } from "effect"
import { type ClientPrincipal, principalOf } from "../auth/ClientAccess.js"
import { ClientTokens } from "../auth/ClientTokens.js"
import { covers, TokenRevocations } from "../auth/TokenRevocations.js"
import { AppConfig } from "../config/AppConfig.js"
import { Forbidden, Unavailable } from "../domain/ApiError.js"
import type { ClientTokenClaims } from "../domain/ClientToken.js"
import { JobRunner } from "../ops/JobRunner.js"
import { Lifecycle } from "../ops/Lifecycle.js"
import type { Binding } from "./RealtimeMetrics.js"
import { RealtimeMetrics } from "./RealtimeMetrics.js"
import { reconnectDelayMs } from "./SocketLink.js"

/** Why the server ends a live connection. */
export type Ending = Data.TaggedEnum<{
  /** Its token (or the token's family or user) was revoked. */
  Revoked: {}
  /** Its token expired without an in-band refresh. */
  Expired: {}
  /** The token's channel was deactivated (or its tenant, or it was deleted). */
  ChannelInactive: {}
  /** The node drains; the client comes back after `retryAfterMs`, to another node. */
  Draining: { readonly retryAfterMs: number }
  /** A socket that sent nothing for `SOCKET_IDLE_TIMEOUT_MS` (a half-open connection sends nothing either). */
  Idle: {}
}>
export const Ending = Data.taggedEnum<Ending>()

/**
 * One open socket or event stream, as the node tracks it. `claims` changes when the client refreshes its
 * token in band; `joined` is set by the binding once the connection follows a conversation.
 */
export interface LiveConnection {
  readonly binding: Binding
  claims: ClientTokenClaims
  joined: boolean
  /** Epoch ms of the client's last frame; absent for streams, which only listen. */
  readonly lastInboundAt?: () => number
  /** Ends the connection as `ending` says; called at most once. */
  readonly end: (ending: Ending) => void
}

/** How often expiry, idleness and channel status are looked at. */
const SWEEP_EVERY = Duration.seconds(1)
/** A deactivated channel's connections end within about this (the status read is shared and cached 1 s). */
const CHANNEL_CHECK_EVERY_MS = 2000

/**
 * Every live connection of the node: ended when its token is revoked (through the revocation log, on
 * every node within a second), when it expires, when its channel is deactivated, when a socket idles,
 * and in batches when the node drains. New connections are refused while the node drains.
 */
export class LiveConnections extends Effect.Service<LiveConnections>()("parley/LiveConnections", {
  scoped: Effect.gen(function*() {
    const config = yield* AppConfig
    const tokens = yield* ClientTokens
    const revocations = yield* TokenRevocations
    const lifecycle = yield* Lifecycle
    const metrics = yield* RealtimeMetrics
    const jobs = yield* JobRunner
    const byChannel = new Map<string, Set<LiveConnection>>()
    let size = 0

    const ended = new WeakSet<LiveConnection>()
    const end = (connection: LiveConnection, ending: Ending) => {
      if (ended.has(connection)) return
      ended.add(connection)
      connection.end(ending)
    }
    const each = (visit: (connection: LiveConnection) => void) => {
      for (const set of byChannel.values()) for (const connection of set) visit(connection)
    }

    const add = (connection: LiveConnection) => {
      const key = connection.claims.cid
      const set = byChannel.get(key) ?? new Set()
      set.add(connection)
      byChannel.set(key, set)
      size++
      metrics.opened(connection.binding)
    }
    const remove = (connection: LiveConnection) => {
      const set = byChannel.get(connection.claims.cid)
      if (set === undefined || !set.delete(connection)) return
      if (set.size === 0) byChannel.delete(connection.claims.cid)
      size--
      metrics.closed(connection.binding)
    }

    yield* revocations.changes.pipe(
      Stream.runForEach((revocation) =>
        Effect.sync(() => {
          const now = Date.now()
          for (const connection of byChannel.get(revocation.channelId) ?? []) {
            if (covers(revocation, connection.claims, now)) end(connection, Ending.Revoked())
          }
        })
      ),
      Effect.forkScoped
    )

    let channelsCheckedAt = 0
    const checkChannels = Effect.suspend(() => {
      const now = Date.now()
      if (now - channelsCheckedAt < CHANNEL_CHECK_EVERY_MS) return Effect.void
      channelsCheckedAt = now
      const samples = [...byChannel.values()].flatMap((set) => {
        const first = set.values().next()
        return first.done === true ? [] : [first.value.claims]
      })
      return Effect.forEach(samples, (claims) =>
        tokens.requireUsableChannel(claims).pipe(
          Effect.catchTags({
            CredentialChannelInactive: () => endChannel(claims.cid),
            Unauthorized: () => endChannel(claims.cid),
            // A database outage is not a deactivation: looked at again next time.
            Unavailable: () => Effect.void
          })
        ), { concurrency: 4, discard: true })
    })
    const endChannel = (channelId: string) =>
      Effect.sync(() => {
        for (const connection of byChannel.get(channelId) ?? []) end(connection, Ending.ChannelInactive())
      })

    const sweep = Effect.zipRight(
      Effect.sync(() => {
        const now = Date.now()
        const idleBefore = now - config.socketIdleTimeoutMs
        each((connection) => {
          if (connection.claims.exp * 1000 <= now) end(connection, Ending.Expired())
          else if (connection.lastInboundAt !== undefined && connection.lastInboundAt() < idleBefore) end(connection, Ending.Idle())
        })
      }),
      checkChannels
    )
    yield* jobs.every("sweep_live_connections", SWEEP_EVERY, sweep)

    /** 503 `draining` while the node drains: no new socket or stream is taken. */
    const admit = Effect.suspend(() =>
      lifecycle.drainingNow()
        ? Effect.fail(
          new Unavailable({ message: "this node is draining, connect to another", reason: "draining", retry_after_ms: reconnectDelayMs() })
        )
        : Effect.void
    )

    /** Tracks `connection` until the scope closes. */
    const register = (connection: LiveConnection): Effect.Effect<void, never, Scope.Scope> =>
      Effect.acquireRelease(Effect.sync(() => add(connection)), () => Effect.sync(() => remove(connection)))

    /**
     * A fresh token for an open connection (the in-band refresh, an extension): valid now, and of the
     * same tenant, channel, end user and conversation as the one it replaces (403 `forbidden` otherwise).
     */
    const refresh = (connection: LiveConnection, token: string) =>
      Effect.gen(function*() {
        const principal: ClientPrincipal = yield* tokens.authenticate(token)
        const now = connection.claims
        const next = principal.claims
        if (
          next.tid !== now.tid || next.cid !== now.cid || (next.user_id ?? null) !== (now.user_id ?? null) ||
          (next.conversation_id ?? null) !== (now.conversation_id ?? null)
        ) {
          return yield* new Forbidden({ message: "the new token is not for the same tenant, channel, user and conversation" })
        }
        connection.claims = next
        return principalOf(next)
      })

    /**
     * Ends every connection with `Draining`, `DRAIN_BATCH_SIZE` at a time every `DRAIN_BATCH_INTERVAL_MS`,
     * those that never joined first (they are cheap to lose).
     */
    const drain = Effect.gen(function*() {
      const all: Array<LiveConnection> = []
      each((connection) => all.push(connection))
      all.sort((a, b) => Number(a.joined) - Number(b.joined))
      for (let i = 0; i < all.length; i += config.drainBatchSize) {
        if (i > 0) yield* Effect.sleep(Duration.millis(config.drainBatchIntervalMs))
        for (const connection of all.slice(i, i + config.drainBatchSize)) {
          end(connection, Ending.Draining({ retryAfterMs: reconnectDelayMs() }))
        }
      }
      if (all.length > 0) yield* Effect.logInfo("live connections closed for the drain").pipe(Effect.annotateLogs("connections", all.length))
    })

    return { admit, register, refresh, drain, size: () => size } as const
  })
}) {}
