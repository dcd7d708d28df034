import { Data, Duration, Effect, Schedule } from "effect"

class StillNotSo extends Data.TaggedError("StillNotSo") {}

/**
 * Reads `read` every 100 ms until its value `holds`, and returns that value; after `within` the
 * test dies naming `what` and the last value read. Errors of `read` end the wait at once.
 */
export const eventually = <A, E, R>(
  read: Effect.Effect<A, E, R>,
  holds: (value: A) => boolean,
  options: { readonly within?: Duration.DurationInput; readonly what?: string } = {}
): Effect.Effect<A, E, R> =>
  Effect.suspend(() => {
    const within = options.within ?? "30 seconds"
    let last: A | undefined
    return Effect.tap(read, (value) => {
      last = value
    }).pipe(
      Effect.repeat({ schedule: Schedule.spaced("100 millis"), until: holds }),
      Effect.timeoutFail({ duration: within, onTimeout: () => new StillNotSo() }),
      Effect.map(() => last as A),
      Effect.catchTag("StillNotSo", () =>
        Effect.dieMessage(`${options.what ?? "still not so"} after ${Duration.format(within)}: ${JSON.stringify(last)}`))
    )
  })
