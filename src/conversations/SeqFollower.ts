import { Chunk, Effect, Option, PubSub, Stream } from "effect"
import type { Activity } from "../domain/Activity.js"

/**
 * Live activities a conversation's listeners may fall behind on before the oldest ones are dropped
 * for them. Nothing is lost by it: a listener that finds a gap reads it from the table.
 */
export const LIVE_BUFFER = 1024

/** Stored activities one read of a catching-up follower (a replay, a gap fill) asks for. */
export const CATCH_UP_PAGE = 500

/** Reads up to `limit` stored activities with seq above `after`, oldest first. */
export type ReadAfter<E> = (after: number, limit: number) => Effect.Effect<ReadonlyArray<Activity>, E>

/** A fan-out of live activities bounded in memory: a slow listener loses the oldest, never the newest. */
export const livePubSub = () => PubSub.sliding<Activity>(LIVE_BUFFER)

/** Stored activities with seq above `after` and below `before` (unbounded when absent), in pages. */
export const storedBetween = <E>(read: ReadAfter<E>, page: number, after: number, before = Infinity) =>
  Stream.paginateChunkEffect(after, (from) =>
    read(from, page).pipe(
      Effect.map((rows) => {
        const wanted = rows.filter((a) => a.seq < before)
        const done = rows.length < page || wanted.length < rows.length
        return [Chunk.fromIterable(wanted), done ? Option.none<number>() : Option.some(rows[rows.length - 1]!.seq)] as const
      })
    ))

/**
 * Every activity above `fromSeq`, once each and in seq order: stored ones, then `live`; a gap in `live`
 * (dropped for a slow listener, or published before subscribing) is filled from the table first.
 */
export const inSeqOrder = <E>(options: {
  readonly fromSeq: number
  readonly storedBelow?: number
  readonly live: Stream.Stream<Activity>
  readonly read: ReadAfter<E>
  readonly page: number
}): Stream.Stream<Activity, E> => {
  const { live, page, read } = options
  let last = options.fromSeq
  const next = (activity: Activity): Stream.Stream<Activity, E> =>
    activity.seq <= last
      ? Stream.empty
      : activity.seq === last + 1
      ? Stream.succeed(activity)
      : Stream.concat(storedBetween(read, page, last, activity.seq), Stream.succeed(activity))
  return Stream.concat(storedBetween(read, page, options.fromSeq, options.storedBelow), live).pipe(
    Stream.flatMap((activity) => Stream.suspend(() => next(activity))),
    Stream.tap((activity) => Effect.sync(() => (last = activity.seq)))
  )
}
