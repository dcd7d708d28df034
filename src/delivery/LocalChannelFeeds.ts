import { Effect, PubSub, type Scope } from "effect"
import { livePubSub } from "../conversations/SeqFollower.js"
import type { Activity } from "../domain/Activity.js"

/**
 * The live feeds of the channels whose entities run on this node: each channel entity opens its feed for
 * its lifetime; its loop's `websocket` sender publishes into it, and the entity's `Follow` streams read it.
 */
export class LocalChannelFeeds extends Effect.Service<LocalChannelFeeds>()("parley/LocalChannelFeeds", {
  sync: () => {
    const feeds = new Map<string, PubSub.PubSub<Activity>>()

    /** The channel's feed until the scope closes (the entity's). A slow follower loses the oldest activities. */
    const open = (channelId: string): Effect.Effect<PubSub.PubSub<Activity>, never, Scope.Scope> =>
      Effect.acquireRelease(
        Effect.tap(livePubSub(), (feed) => Effect.sync(() => feeds.set(channelId, feed))),
        (feed) =>
          Effect.zipRight(
            // A newer entity of the channel may have opened its own meanwhile: only this one is removed.
            Effect.sync(() => feeds.get(channelId) === feed && feeds.delete(channelId)),
            PubSub.shutdown(feed)
          )
      )

    /** Hands the activity to the channel's followers; false when the channel's entity is not on this node. */
    const publish = (channelId: string, activity: Activity): Effect.Effect<boolean> =>
      Effect.suspend(() => {
        const feed = feeds.get(channelId)
        return feed === undefined ? Effect.succeed(false) : Effect.as(PubSub.publish(feed, activity), true)
      })

    return { open, publish } as const
  }
}) {}
