import { Effect, Layer, PubSub, Stream } from "effect"
import { ReadPositions } from "../conversations/ReadPositions.js"
import type { ConversationId } from "../domain/Conversation.js"
import { ConversationSignals, Signal } from "./ConversationSignals.js"

/** Signals a listener may lag behind before the oldest are dropped: they are ephemeral. */
const LISTENER_BACKLOG = 256

const sameViewers = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) => a.length === b.length && a.every((v, i) => v === b[i])

/** The signals of one node's listeners, without other nodes: the fan-out the cluster-wide signals build on. */
export const makeLocalSignals = Effect.gen(function*() {
  const positions = yield* ReadPositions
  const topics = new Map<ConversationId, { readonly pubsub: PubSub.PubSub<Signal>; listeners: number }>()
  const viewing = new Map<ConversationId, Map<string, number>>()

  /** Hands `signal` to this node's listeners of the conversation. */
  const publish = (conversationId: ConversationId, signal: Signal) =>
    Effect.suspend(() => {
      const topic = topics.get(conversationId)
      return topic === undefined ? Effect.void : Effect.asVoid(PubSub.publish(topic.pubsub, signal))
    })

  const viewersOf = (conversationId: ConversationId): ReadonlyArray<string> => [...(viewing.get(conversationId)?.keys() ?? [])].sort()

  /** Changes `userId`'s count of views; publishes the viewers when the set changed. */
  const changeViews = (conversationId: ConversationId, userId: string, by: 1 | -1) =>
    Effect.suspend(() => {
      const before = viewersOf(conversationId)
      const counts = viewing.get(conversationId) ?? new Map<string, number>()
      const count = (counts.get(userId) ?? 0) + by
      if (count > 0) counts.set(userId, count)
      else counts.delete(userId)
      if (counts.size > 0) viewing.set(conversationId, counts)
      else viewing.delete(conversationId)
      const after = viewersOf(conversationId)
      return sameViewers(before, after) ? Effect.void : publish(conversationId, Signal.Presence({ viewers: after }))
    })

  const follow = (conversationId: ConversationId): Stream.Stream<Signal> =>
    Stream.unwrapScoped(Effect.gen(function*() {
      const topic = yield* Effect.acquireRelease(
        Effect.suspend(() => {
          const existing = topics.get(conversationId)
          if (existing !== undefined) {
            existing.listeners++
            return Effect.succeed(existing)
          }
          return Effect.map(PubSub.sliding<Signal>(LISTENER_BACKLOG), (pubsub) => {
            const created = { pubsub, listeners: 1 }
            topics.set(conversationId, created)
            return created
          })
        }),
        (topic) =>
          Effect.suspend(() => {
            topic.listeners--
            if (topic.listeners > 0) return Effect.void
            topics.delete(conversationId)
            return PubSub.shutdown(topic.pubsub)
          })
      )
      return Stream.fromQueue(yield* PubSub.subscribe(topic.pubsub))
    }))

  return ConversationSignals.of({
    typing: (conversationId, userId, origin) => publish(conversationId, Signal.Typing({ userId, origin })),
    read: (conversationId, userId, seq, origin) =>
      Effect.flatMap(positions.advance(conversationId, userId, seq), (stored) =>
        publish(conversationId, Signal.Read({ userId, seq: stored, origin }))),
    view: (conversationId, userId) =>
      Effect.acquireRelease(changeViews(conversationId, userId, 1), () => changeViews(conversationId, userId, -1)),
    viewers: (conversationId) => Effect.sync(() => viewersOf(conversationId)),
    follow
  })
})

/** Signals for a single node (the cluster-wide layer replaces it where nodes share conversations). */
export const LocalSignalsLive = Layer.effect(ConversationSignals, makeLocalSignals)
