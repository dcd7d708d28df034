import { EntityId, Sharding, type ShardId } from "@effect/cluster"
import { Duration, Effect, ExecutionStrategy, Exit, Fiber, Runtime, Scope } from "effect"
import type { ConversationId } from "../domain/Conversation.js"
import { JobRunner } from "../ops/JobRunner.js"
import { ActivityRepo } from "./ActivityRepo.js"
import { ActivityWriter } from "./ActivityWriter.js"
import { ConversationStateRepo } from "./ConversationState.js"
import { RoutingRules } from "../routing/RoutingRules.js"
import { type ConversationCore, makeConversationCore } from "./ConversationCore.js"

/** A core unused this long, with no open stream, is dropped (its state is reloaded when needed). */
const IDLE_AFTER = Duration.minutes(5)
const SWEEP_EVERY = Duration.minutes(1)
/** The cores one node runs at most while any is idle; busy ones are never dropped (ADR 0004). */
const MAX_RUNNING_CORES = 10_000

interface Running {
  readonly core: ConversationCore
  readonly shardId: ShardId.ShardId
  readonly scope: Scope.CloseableScope
  /** Monotonic (`performance.now()`): a wall clock stepped forward must not make a busy core look idle. */
  lastUsed: number
}

/**
 * The conversation cores on this node, one per owned conversation; local appends reach them without the
 * cluster's RPC layers. A moment with two owners is still settled by the database's compare-and-set.
 */
export class ConversationCores extends Effect.Service<ConversationCores>()("parley/ConversationCores", {
  scoped: (maxRunning: number = MAX_RUNNING_CORES) => Effect.gen(function*() {
    const sharding = yield* Sharding.Sharding
    const writer = yield* ActivityWriter
    const activityRepo = yield* ActivityRepo
    const states = yield* ConversationStateRepo
    const routing = yield* RoutingRules
    const jobs = yield* JobRunner
    const scope = yield* Effect.scope
    // In order of use, least recent first.
    const running = new Map<ConversationId, Running>()
    const creating = yield* Effect.makeSemaphore(1)
    // Cores start in fibers of this service, not in their first caller's: a core's long-lived fiber
    // would keep that caller's fiber (and its answer) for as long as the core runs, and log with its
    // request id.
    const startDetached = Runtime.runFork(yield* Effect.runtime<never>())

    const shardOf = (conversationId: ConversationId) => sharding.getShardId(EntityId.make(conversationId), "default")

    /** True while this node owns the conversation's shard (a running core knows its shard: no hashing). */
    const isOwned = (conversationId: ConversationId) =>
      sharding.hasShardId(running.get(conversationId)?.shardId ?? shardOf(conversationId))

    const existing = (conversationId: ConversationId) => {
      const entry = running.get(conversationId)
      if (entry === undefined) return undefined
      entry.lastUsed = performance.now()
      running.delete(conversationId)
      running.set(conversationId, entry)
      return entry.core
    }

    /** Takes the cores out at once; their scopes close after (a closing core still answers what it took). */
    const drop = (entries: ReadonlyArray<readonly [ConversationId, Running]>) => {
      for (const [id] of entries) running.delete(id)
      return Effect.forEach(entries, ([, entry]) => Scope.close(entry.scope, Exit.void), { discard: true })
    }

    /**
     * Drops the least recently used idle cores until one more fits within `maxRunning`. A busy core
     * passed over counts as used now, so the next start does not look at it first again.
     */
    const makeRoom = Effect.suspend(() => {
      const excess = running.size + 1 - maxRunning
      if (excess <= 0) return Effect.void
      const idle: Array<readonly [ConversationId, Running]> = []
      const busy: Array<readonly [ConversationId, Running]> = []
      for (const pair of running) {
        if (idle.length === excess) break
        ;(pair[1].core.idle() ? idle : busy).push(pair)
      }
      for (const [id, entry] of busy) {
        running.delete(id)
        running.set(id, entry)
      }
      return drop(idle)
    })

    /**
     * Called by a core whose conversation was not found: it goes at once (unless a stream is open on
     * it), and a later command starts a new one. Its last round still answers what it took.
     */
    const missing = (conversationId: ConversationId, child: Scope.CloseableScope) => () => {
      const entry = running.get(conversationId)
      if (entry?.scope !== child || entry.core.subscribers() > 0) return
      running.delete(conversationId)
      startDetached(Scope.close(child, Exit.void))
    }

    /** The conversation's core, started on first use. */
    const get = (conversationId: ConversationId): Effect.Effect<ConversationCore> =>
      Effect.suspend(() => {
        const found = existing(conversationId)
        if (found !== undefined) return Effect.succeed(found)
        const start = creating.withPermits(1)(
          Effect.suspend(() => {
            const raced = existing(conversationId)
            if (raced !== undefined) return Effect.succeed(raced)
            return Effect.gen(function*() {
              yield* makeRoom
              const child = yield* Scope.fork(scope, ExecutionStrategy.sequential)
              const shardId = shardOf(conversationId)
              const core = yield* makeConversationCore(
                conversationId,
                () => sharding.hasShardId(shardId),
                missing(conversationId, child)
              ).pipe(
                Scope.extend(child),
                Effect.provideService(ActivityWriter, writer),
                Effect.provideService(ActivityRepo, activityRepo),
                Effect.provideService(ConversationStateRepo, states),
                Effect.provideService(RoutingRules, routing)
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
      return drop([...running].filter(([, entry]) => entry.lastUsed < cutoff && entry.core.idle()))
    })
    yield* jobs.every("drop_idle_cores", SWEEP_EVERY, sweep)

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
