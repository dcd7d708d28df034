import { type Cause, Effect } from "effect"

/**
 * Logs one warning when something repeated many times a second starts failing and one line when it
 * works again, not a line per failure (while the database is away, every attempt fails).
 */
export const failureLog = (failed: string, recovered: string) => {
  let failing = false
  return {
    failed: (cause: Cause.Cause<unknown>) =>
      failing ? Effect.void : Effect.zipRight(Effect.sync(() => (failing = true)), Effect.logWarning(failed, cause)),
    succeeded: Effect.suspend(() =>
      failing ? Effect.zipRight(Effect.sync(() => (failing = false)), Effect.logInfo(recovered)) : Effect.void
    )
  }
}
