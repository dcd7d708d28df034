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
 * Ends a listener's stream after about `lifetimeMs` (±10 %) and interrupts one still open later: the
 * cluster never ends the stream of a node that died silently (Effect-TS/effect#8214; ADR 0014).
 */
export const boundedLifetime = (lifetimeMs: number) => <A, E, R>(stream: Stream.Stream<A, E, R>) =>
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
