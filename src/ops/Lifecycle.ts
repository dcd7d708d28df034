import { Deferred, Effect, Ref } from "effect"

/** Whether the node is draining, and a signal that long-lived streams and sockets wait on. */
export class Lifecycle extends Effect.Service<Lifecycle>()("parley/Lifecycle", {
  effect: Effect.gen(function*() {
    const draining = yield* Ref.make(false)
    const drainStarted = yield* Deferred.make<void>()
    return {
      isDraining: Ref.get(draining),
      /** Marks the node as draining: readiness answers 503 `draining` from now on. */
      startDrain: Ref.set(draining, true).pipe(Effect.zipRight(Deferred.succeed(drainStarted, undefined)), Effect.asVoid),
      /** Completes when the drain begins. */
      awaitDrain: Deferred.await(drainStarted)
    } as const
  })
}) {}
