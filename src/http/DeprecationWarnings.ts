import { Clock, Effect } from "effect"

/** How often the use of deprecated API by one channel (one surface, without a channel) is logged. */
const WARNING_INTERVAL_MS = 60_000

/** Channels and surfaces remembered at once; past that the one warned longest ago is forgotten. */
export const MAX_REMEMBERED = 10_000

/**
 * The warning an authenticated use of a deprecated surface logs, at most once a minute per channel, so a
 * polling client cannot flood the log; a refused use logs nothing.
 */
export class DeprecationWarnings extends Effect.Service<DeprecationWarnings>()("parley/DeprecationWarnings", {
  sync: () => {
    // Insertion order is warning order: the first key is the one warned longest ago.
    const lastWarned = new Map<string, number>()
    /** Logs `surface` used by `channelId` (null: no channel) unless it was logged within the interval. */
    const warn = (surface: string, channelId: string | null): Effect.Effect<void> =>
      Effect.flatMap(Clock.currentTimeMillis, (now) => {
        const key = channelId ?? surface
        const last = lastWarned.get(key)
        if (last !== undefined && now - last < WARNING_INTERVAL_MS) return Effect.void
        lastWarned.delete(key)
        if (lastWarned.size >= MAX_REMEMBERED) lastWarned.delete(lastWarned.keys().next().value!)
        lastWarned.set(key, now)
        return Effect.logWarning("deprecated API used").pipe(
          Effect.annotateLogs(channelId === null ? { surface } : { surface, channel_id: channelId })
        )
      })
    return { warn } as const
  }
}) {}
