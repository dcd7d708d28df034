import { Context, type Effect } from "effect"

/**
 * Each channel's delivery loop, wherever its owner runs: what `src/` uses to start it. Implemented in
 * `cluster/` by the channel entity's client.
 */
export class ChannelDeliveries extends Context.Tag("parley/ChannelDeliveries")<ChannelDeliveries, {
  /**
   * Starts or nudges the channel's loop so it looks for due deliveries. Fire and forget: it never
   * fails nor waits for the owner; wakes of one channel close together are coalesced, and a wake lost
   * on the way is made up for by the sweep.
   */
  readonly wake: (channelId: string) => Effect.Effect<void>
  /**
   * A wake after the channel's breaker was changed by hand (a resume): it also cuts short a running
   * loop's wait for a known time (an open breaker's cool-down, the rate limit), so the change is taken
   * in at once. Fire and forget like `wake`, not coalesced: operators' changes are rare.
   */
  readonly recheck: (channelId: string) => Effect.Effect<void>
}>() {}
