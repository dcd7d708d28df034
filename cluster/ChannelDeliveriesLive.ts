import { Duration, Effect, FiberSet, Layer } from "effect"
import { ChannelDeliveries } from "../src/delivery/ChannelDeliveries.js"
import { ChannelEntity } from "./ChannelEntity.js"

/** Wakes of one channel within this window are coalesced into the first and one at its end. */
const COALESCE = Duration.millis(50)
/** A wake's bound: a cluster call retries while a shard moves; the sweep covers one given up. */
const WAKE_TIMEOUT = Duration.seconds(5)

/** Channels' loops woken through the cluster: each wake goes to the channel's entity, in the background. */
export const ChannelDeliveriesLive = Layer.scoped(
  ChannelDeliveries,
  Effect.gen(function*() {
    const entity = yield* ChannelEntity.client
    const run = yield* FiberSet.makeRuntime<never, void, never>()
    // Channels woken within the current window; `true` once another wake came in it.
    const windows = new Map<string, boolean>()

    const send = (channelId: string, recheck = false) =>
      entity(channelId).Wake({ recheck }).pipe(
        Effect.timeout(WAKE_TIMEOUT),
        Effect.catchAllCause((cause) => Effect.logDebug("channel wake lost; the sweep makes up for it", cause))
      )

    const window = (channelId: string): Effect.Effect<void> =>
      Effect.zipRight(
        Effect.zipRight(send(channelId), Effect.sleep(COALESCE)),
        Effect.suspend(() => {
          const again = windows.get(channelId) === true
          windows.delete(channelId)
          // The wake that came during the window is sent now: one coalesced wake is never lost.
          return again ? send(channelId) : Effect.void
        })
      )

    return ChannelDeliveries.of({
      wake: (channelId) =>
        Effect.sync(() => {
          if (windows.has(channelId)) {
            windows.set(channelId, true)
            return
          }
          windows.set(channelId, false)
          run(window(channelId))
        }),
      recheck: (channelId) => Effect.sync(() => run(send(channelId, true)))
    })
  })
)
