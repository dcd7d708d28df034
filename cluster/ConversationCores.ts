import { EntityId, Sharding, type ShardId } from "@effect/cluster"
import { Duration, Effect, ExecutionStrategy, Exit, Fiber, Runtime, Schedule, Scope } from "effect"
import { ActivityRepo } from "../src/conversations/ActivityRepo.js"
import { ActivityWriter } from "../src/conversations/ActivityWriter.js"
import { ConversationStateRepo } from "../src/conversations/ConversationState.js"
import { type ConversationCore, makeConversationCore } from "./ConversationCore.js"

/** A core unused this long, with no open stream, is dropped (its state is reloaded when needed). */
const IDLE_AFTER = Duration.minutes(5)
const SWEEP_EVERY = Duration.minutes(1)

interface Running {
  readonly core: ConversationCore
  readonly shardId: ShardId.ShardId
  readonly scope: Scope.CloseableScope
  /** Monotonic (`performance.now()`): a wall clock stepped forward must not make a busy core look idle. */
  lastUsed: number
}

/**
 * The conversation cores running on this node, one per conversation whose shard it owns. The
 * conversation entity delegates to them, and so do local callers directly: an append for a
 * conversation this node owns skips the cluster's RPC layers. Ownership is checked per round; a
 * moment with two owners (handoff, crash) is still settled by the database's compare-and-set.
 */
export class ConversationCores extends Effect.Service<ConversationCores>()("parley/ConversationCores", {
  scoped: Effect.gen(function*() {
    const sharding = yield* Sharding.Sharding
    const writer = yield* ActivityWriter
    const store = yield* ActivityRepo
    const states = yield* ConversationStateRepo
    const scope = yield* Effect.scope
    const running = new Map<string, Running>()
    const creating = yield* Effect.makeSemaphore(1)
    // Cores start in fibers of this service, not in their first caller's: a core's long-lived fiber
    // would keep that caller's fiber (and its answer) for as long as the core runs, and log with its
    // request id.
    const startDetached = Runtime.runFork(yield* Effect.runtime<never>())

    const shardOf = (conversationId: string) => sharding.getShardId(EntityId.make(conversationId), "default")

    /** True while this node owns the conversation's shard (a running core knows its shard: no hashing). */
    const isOwned = (conversationId: string) =>
      sharding.hasShardId(running.get(conversationId)?.shardId ?? shardOf(conversationId))

    const existing = (conversationId: string) => {
      const entry = running.get(conversationId)
      if (entry !== undefined) entry.lastUsed = performance.now()
      return entry?.core
    }

    /** The conversation's core, started on first use. */
    const get = (conversationId: string): Effect.Effect<ConversationCore> =>
      Effect.suspend(() => {
        const found = existing(conversationId)
        if (found !== undefined) return Effect.succeed(found)
        const start = creating.withPermits(1)(
          Effect.suspend(() => {
            const raced = existing(conversationId)
            if (raced !== undefined) return Effect.succeed(raced)
            return Effect.gen(function*() {
              const child = yield* Scope.fork(scope, ExecutionStrategy.sequential)
              const shardId = shardOf(conversationId)
              const core = yield* makeConversationCore(conversationId, () => sharding.hasShardId(shardId)).pipe(
                Scope.extend(child),
                Effect.provideService(ActivityWriter, writer),
                Effect.provideService(ActivityRepo, store),
                Effect.provideService(ConversationStateRepo, states)
              )
              running.set(conversationId, { core, shardId, scope: child, lastUsed: performance.now() })
              return core
            })
          })
        )
        // A caller that stops waiting leaves the start to finish: the core is there for the next one.
        return Fiber.join(startDetached(start))
      })

    const sweep = Effect.suspend(() => {
      const cutoff = performance.now() - Duration.toMillis(IDLE_AFTER)
      const idle = [...running].filter(([, entry]) => entry.lastUsed < cutoff && entry.core.subscribers() === 0)
      for (const [id] of idle) running.delete(id)
      return Effect.forEach(idle, ([, entry]) => Scope.close(entry.scope, Exit.void), { discard: true })
    })
    yield* Effect.forkScoped(sweep.pipe(Effect.repeat(Schedule.spaced(SWEEP_EVERY))))

    /** Listeners' streams open on this node's cores, from any node. */
    const streams = () => {
      let open = 0
      for (const entry of running.values()) open += entry.core.subscribers()
      return open
    }

    return {
      get,
      /** The conversation's core if it runs already (without an effect: the append path's common case). */
      find: existing,
      isOwned,
      running: () => running.size,
      streams
    } as const
  })
}) {}
