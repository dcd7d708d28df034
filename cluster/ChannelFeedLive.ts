import { Duration, Effect, Layer } from "effect"
import { LIVE_BUFFER } from "../src/conversations/SeqFollower.js"
import { ChannelFeed } from "../src/realtime/ChannelFeed.js"
import { makeSharedUpstreams } from "../src/realtime/SharedUpstreams.js"
import { ChannelEntity, type ChannelFeedItem } from "./ChannelEntity.js"

/**
 * A node follows each channel's feed anew this often: a stream left silent by an owner that crashed
 * recovers within it.
 */
const UPSTREAM_LIFETIME = Duration.seconds(30)
/**
 * The longest a listener waits for the node to follow the channel's feed (the owner reached, which takes
 * seconds while its shard moves): past it, it listens anyway and hears what arrives once the upstream is
 * in place. Well below a Phoenix client's join timeout (10 s by default).
 */
const FOLLOW_WAIT = Duration.seconds(2)

/** Channel feeds across the cluster: each node follows a channel's entity stream once for all its local sockets. */
export const ChannelFeedLive = Layer.scoped(
  ChannelFeed,
  Effect.gen(function*() {
    const entity = yield* ChannelEntity.client
    const feeds = yield* makeSharedUpstreams({
      upstream: (channelId: string) => entity(channelId).Follow(),
      lifetime: UPSTREAM_LIFETIME,
      backlog: LIVE_BUFFER,
      translate: () => (item: typeof ChannelFeedItem.Type) => item._tag === "Delivered" ? item.activity : undefined
    })
    return ChannelFeed.of({
      listen: (channelId) =>
        Effect.flatMap(feeds.subscribe(channelId), (subscription) =>
          subscription.following.pipe(
            Effect.timeout(FOLLOW_WAIT),
            Effect.catchTag("TimeoutException", () =>
              Effect.logWarning("channel feed not followed in time; listening anyway").pipe(
                Effect.annotateLogs("channel_id", channelId)
              )),
            Effect.as(subscription.items)
          ))
    })
  })
)
