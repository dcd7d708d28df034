import { type Duration, Effect, Fiber, Ref, Schedule, Scope } from "effect"

/**
 * Runs the node's periodic background loops (ADR 0020). A failing run is retried next tick; a loop that
 * stops early is logged and makes `isRunning` false for good (readiness: `oban`).
 */
export class JobRunner extends Effect.Service<JobRunner>()("parley/JobRunner", {
  effect: Effect.gen(function*() {
    const stopped = yield* Ref.make(false)

    /**
     * Runs `job` now and then every `interval` until the caller's scope closes: `interval` after each
     * run ends, or with `fixedRate` at every multiple of it (a run that overran is followed at once).
     */
    const every = <E, R>(
      name: string,
      interval: Duration.DurationInput,
      job: Effect.Effect<void, E, R>,
      options: { readonly fixedRate?: boolean } = {}
    ): Effect.Effect<void, never, R | Scope.Scope> =>
      // Forked and handed to the scope in one step; the loop itself can always be stopped.
      Effect.uninterruptible(
        Effect.gen(function*() {
          const scope = yield* Effect.scope
          // Set before the scope stops the loop: that stop ends its life, it is not a death.
          let retired = false
          const fiber = yield* job.pipe(
            Effect.catchAllCause((cause) => Effect.logWarning("background job failed", cause)),
            Effect.repeat(options.fixedRate === true ? Schedule.fixed(interval) : Schedule.spaced(interval)),
            Effect.interruptible,
            // Runs' failures are caught and the schedule has no end: the loop ends only when stopped.
            Effect.onError((cause) =>
              retired ? Effect.void : Effect.zipRight(Ref.set(stopped, true), Effect.logError("background job stopped", cause))
            ),
            Effect.forkDaemon
          )
          yield* Scope.addFinalizer(
            scope,
            Effect.suspend(() => {
              retired = true
              return Fiber.interrupt(fiber)
            })
          )
        }).pipe(Effect.annotateLogs("job", name))
      )

    return { every, isRunning: Effect.map(Ref.get(stopped), (s) => !s) } as const
  })
}) {}
