import { Duration, Effect, Layer, Runtime } from "effect"
import { ReadPositions } from "../src/conversations/ReadPositions.js"
import { BadRequest, clusterUnavailable, type Unavailable } from "../src/domain/ApiError.js"
import type { ConversationId } from "../src/domain/Conversation.js"
import { JobRunner } from "../src/ops/JobRunner.js"
import { ConversationSignals, Signal } from "../src/realtime/ConversationSignals.js"
import { makeSharedUpstreams } from "../src/realtime/SharedUpstreams.js"
import { ConversationSignalsEntity, MAX_ID_LENGTH, MAX_REPORTED_VIEWERS, type SignalWire } from "./ConversationSignalsEntity.js"

/**
 * A node's report of its viewers counts this long unless renewed. With renewals every 2 s, one lost or
 * late renewal does not drop anyone; the viewers of a node killed with SIGKILL drop out within the lease
 * plus one sweep (7 s) of its last renewal, when the entity survives (docs/realtime/signals.md).
 */
export const PRESENCE_LEASE = Duration.seconds(6)
/** Each node reports its viewers of every conversation this often, and at once when a set changes. */
export const PRESENCE_RENEW_EVERY = Duration.seconds(2)
/** Every entity call's deadline: the cluster retries forever while an entity moves. */
const CALL_TIMEOUT = Duration.seconds(2)
/**
 * A node follows each entity stream anew this often: a stream left silent by an owner that crashed (and
 * whose re-send never resumed) recovers within it. The new stream starts with the current viewers.
 */
const UPSTREAM_LIFETIME = Duration.seconds(30)
/** Signals a local listener may lag behind before the oldest are dropped: they are ephemeral. */
const LISTENER_BACKLOG = 256
/** Renewals in flight at once. */
const RENEW_CONCURRENCY = 16

interface Viewing {
  /** Local views per user id. */
  readonly counts: Map<string, number>
  /** This node's version of the set, sent with each report. */
  version: number
}

const signalOf = (wire: typeof SignalWire.Type): Signal => {
  switch (wire._tag) {
    case "Typing":
      return Signal.Typing({ userId: wire.userId, origin: wire.origin })
    case "Read":
      return Signal.Read({ userId: wire.userId, seq: wire.seq, origin: wire.origin })
    case "Presence":
      return Signal.Presence({ viewers: wire.viewers })
  }
}

const fits = (id: string) => id.length <= MAX_ID_LENGTH

/**
 * Typing, read receipts and presence across the cluster: each conversation's signals entity fans them out
 * to every node following it; each node follows it once for all its local listeners, and reports its
 * viewers with a lease the entity counts until it expires.
 */
export const ConversationSignalsLive = Layer.scoped(
  ConversationSignals,
  Effect.gen(function*() {
    const positions = yield* ReadPositions
    const jobs = yield* JobRunner
    const entity = yield* ConversationSignalsEntity.client
    const scope = yield* Effect.scope
    // Reports run as fibers of this layer, not of the viewer that started them.
    const forkInNode = Runtime.runFork(yield* Effect.runtime<never>())
    // Per process start: a restarted node's old leases are another node's, and expire.
    const node = crypto.randomUUID()
    let versions = 0
    const viewing = new Map<ConversationId, Viewing>()

    const call = <A, E>(effect: Effect.Effect<A, E>): Effect.Effect<A, Unavailable> =>
      effect.pipe(
        Effect.timeoutFail({ duration: CALL_TIMEOUT, onTimeout: clusterUnavailable }),
        // The client's failures are the cluster's (mailbox full, storage): each is a busy cluster.
        Effect.mapError(clusterUnavailable)
      )

    // Each node follows a conversation's signals once for all its local listeners.
    const { follow } = yield* makeSharedUpstreams({
      upstream: (conversationId: ConversationId) => entity(conversationId).Follow(),
      lifetime: UPSTREAM_LIFETIME,
      backlog: LISTENER_BACKLOG,
      translate: () => {
        // The viewers last handed to local listeners (JSON), to drop repeats: after a resubscribe, a warm-up.
        let lastPresence: string | undefined
        return (wire: typeof SignalWire.Type) => {
          if (wire._tag === "Presence") {
            const key = JSON.stringify(wire.viewers)
            if (key === lastPresence) return undefined
            lastPresence = key
          }
          return signalOf(wire)
        }
      }
    })

    const localViewers = (entry: Viewing | undefined): ReadonlyArray<string> => [...(entry?.counts.keys() ?? [])].sort()

    /** Reports this node's viewers of the conversation; a failure waits for the next renewal. */
    const report = (conversationId: ConversationId, viewers: ReadonlyArray<string>, version: number) =>
      call(entity(conversationId).Present({
        node,
        version,
        viewers: viewers.slice(0, MAX_REPORTED_VIEWERS),
        leaseMs: Duration.toMillis(PRESENCE_LEASE)
      })).pipe(
        Effect.catchTag("Unavailable", () =>
          Effect.logDebug("presence report failed; the next renewal retries").pipe(
            Effect.annotateLogs("conversation_id", conversationId)
          ))
      )

    /** Changes `userId`'s count of local views; when the node's set changed, reports it at once. */
    const changeViews = (conversationId: ConversationId, userId: string, by: 1 | -1) =>
      Effect.suspend(() => {
        const entry = viewing.get(conversationId) ?? { counts: new Map<string, number>(), version: 0 }
        const had = entry.counts.has(userId)
        const count = (entry.counts.get(userId) ?? 0) + by
        if (count > 0) entry.counts.set(userId, count)
        else entry.counts.delete(userId)
        if (entry.counts.size > 0) viewing.set(conversationId, entry)
        else viewing.delete(conversationId)
        if (had === entry.counts.has(userId)) return Effect.void
        entry.version = ++versions
        const viewers = localViewers(entry)
        // Not awaited: a viewer joins or leaves at once; versions keep late reports from counting.
        return Effect.sync(() => forkInNode(report(conversationId, viewers, entry.version), { scope }))
      })

    const renewAll = Effect.suspend(() =>
      Effect.forEach(
        [...viewing],
        ([conversationId, entry]) => report(conversationId, localViewers(entry), entry.version),
        { concurrency: RENEW_CONCURRENCY, discard: true }
      )
    )
    // At a fixed rate: a slow run does not push the next renewal past the lease.
    yield* jobs.every("renew_presence_leases", PRESENCE_RENEW_EVERY, renewAll, { fixedRate: true })

    return ConversationSignals.of({
      typing: (conversationId, userId, origin) =>
        !fits(userId) || !fits(origin)
          ? Effect.void
          : call(entity(conversationId).Publish({ signal: { _tag: "Typing", userId, origin } })).pipe(
            // Ephemeral: a typing that cannot be handed on now is worthless later.
            Effect.catchTag("Unavailable", () => Effect.void)
          ),
      read: (conversationId, userId, seq, origin) =>
        !fits(userId) || !fits(origin) || !Number.isSafeInteger(seq) || seq < 0
          ? Effect.fail(new BadRequest({ message: "malformed read receipt" }))
          // The position is stored first: a failed broadcast answers Unavailable, and the position stays.
          : Effect.flatMap(positions.advance(conversationId, userId, seq), (stored) =>
            call(entity(conversationId).Publish({ signal: { _tag: "Read", userId, seq: stored, origin } }))),
      view: (conversationId, userId) =>
        fits(userId)
          ? Effect.asVoid(Effect.acquireRelease(changeViews(conversationId, userId, 1), () => changeViews(conversationId, userId, -1)))
          : Effect.void,
      viewers: (conversationId) =>
        call(entity(conversationId).Viewers()).pipe(
          // Without the entity, this node's own viewers are the best answer there is.
          Effect.catchTag("Unavailable", () => Effect.sync(() => localViewers(viewing.get(conversationId))))
        ),
      follow
    })
  })
)
