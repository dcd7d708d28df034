import { Deferred, Effect } from "effect"

/** Whether the node is draining, and a signal that long-lived streams and sockets wait on. */
export class Lifecycle extends Effect.Service<Lifecycle>()("parley/Lifecycle", {
  effect: Effect.gen(function*() {
    // A plain flag: the append route reads it for every answer, outside any effect.
    let draining = false
    const drainingNow = () => draining
    const drainStarted = yield* Deferred.make<void>()
    return {
      isDraining: Effect.sync(drainingNow),
      /** `isDraining` as read now. */
      drainingNow,
      /** Marks the node as draining: readiness answers 503 `draining` from now on. */
      startDrain: Effect.suspend(() => {
        draining = true
        return Deferred.succeed(drainStarted, undefined)
      }).pipe(Effect.asVoid),
      /** Completes when the drain begins. */
      awaitDrain: Deferred.await(drainStarted)
    } as const
  })
}) {}
