import { Duration, Effect, Ref, Schedule } from "effect"

/**
 * Runs the node's periodic background jobs. A failing run is logged and retried at the next tick;
 * readiness reports the runner as down only when a job's fiber has stopped altogether.
 */
export class JobRunner extends Effect.Service<JobRunner>()("parley/JobRunner", {
  scoped: Effect.gen(function*() {
    const scope = yield* Effect.scope
    const stopped = yield* Ref.make(false)

    /** Runs `job` now and then every `interval` until the node stops. */
    const every = <E, R>(name: string, interval: Duration.DurationInput, job: Effect.Effect<void, E, R>) =>
      job.pipe(
        Effect.catchAllCause((cause) =>
          Effect.logWarning("background job failed", cause).pipe(Effect.annotateLogs("job", name))
        ),
        Effect.repeat(Schedule.spaced(interval)),
        Effect.onExit(() => Ref.set(stopped, true)),
        Effect.forkIn(scope),
        Effect.asVoid
      )

    return { every, isRunning: Effect.map(Ref.get(stopped), (s) => !s) } as const
  })
}) {}
