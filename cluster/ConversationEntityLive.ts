import { Entity } from "@effect/cluster"
import { Duration, Effect, Fiber, Random, Stream } from "effect"
import { AppConfig } from "../src/config/AppConfig.js"
import { Unavailable } from "../src/domain/ApiError.js"
import { MOVED_RETRY_MS } from "../src/conversations/ConversationCore.js"
import { conversationIdOf } from "../src/domain/Conversation.js"
import { ConversationCores } from "../src/conversations/ConversationCores.js"
import { ConversationEntity } from "./ConversationEntity.js"

/**
 * The shard moved while the command waited: the caller sends it again and reaches the new owner.
 * Before its deadline this is the entity's only `cluster_unavailable` answer (Conversations relies on it).
 */
export const moved = () =>
  Effect.fail(
    new Unavailable({
      message: "the conversation moved to another node, retry",
      reason: "cluster_unavailable",
      retry_after_ms: MOVED_RETRY_MS
    })
  )

/**
 * A listener's stream ends after about `lifetimeMs` (its node's hub subscribes again from what it
 * has), and one still open a tenth of that later (at least a second) is interrupted. The cluster
 * never ends the stream of a node that died without a word (Effect-TS/effect#8214): an idle one
 * would wait for activities forever, and one with an activity in flight waits forever for the dead
 * node's acknowledgement, not pulling the stream, so only interrupting the fiber that runs it (the
 * entity's request) ends it. Either way the conversation's core would count a listener for good.
 * The lifetime varies by ±10 % so that streams opened together do not all end together.
 */
const boundedLifetime = (lifetimeMs: number) => <A, E, R>(stream: Stream.Stream<A, E, R>) =>
  Stream.unwrapScoped(Effect.gen(function*() {
    const lifetime = lifetimeMs * (yield* Random.nextRange(0.9, 1.1))
    const running = yield* Effect.withFiberRuntime<Fiber.RuntimeFiber<unknown, unknown>>(Effect.succeed)
    yield* Effect.forkScoped(
      Effect.sleep(Duration.millis(lifetime + Math.max(1000, lifetimeMs / 10))).pipe(
        // Not `Fiber.interrupt`: that would wait for the fiber, which waits for this one's scope.
        Effect.zipRight(Effect.fiberIdWith((self) => Fiber.interruptAsFork(running, self)))
      )
    )
    return Stream.interruptAfter(stream, Duration.millis(lifetime))
  }))

/**
 * The conversation entity: the cluster's way to reach a conversation's core on the node that owns
 * it (see `ConversationCores`; the core holds the logic and state).
 */
export const ConversationEntityLive = ConversationEntity.toLayer(
  Effect.gen(function*() {
    // The entity id is a conversation id as its sender decoded it.
    const conversationId = conversationIdOf((yield* Entity.CurrentAddress).entityId)
    const cores = yield* ConversationCores
    const bounded = boundedLifetime((yield* AppConfig).clusterStreamLifetimeMs)
    const core = cores.get(conversationId)
    return ConversationEntity.of({
      Append: ({ payload }) => Effect.flatMap(core, (c) => c.append(payload)).pipe(Effect.catchTag("Moved", moved)),
      SetStatus: ({ payload }) => Effect.flatMap(core, (c) => c.setStatus(payload)).pipe(Effect.catchTag("Moved", moved)),
      Subscribe: ({ payload }) => bounded(Stream.unwrap(Effect.map(core, (c) => c.subscribe(payload.fromSeq))))
    })
  }),
  { concurrency: "unbounded" }
)
