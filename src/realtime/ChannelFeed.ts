import { Context, type Effect, type Scope, type Stream } from "effect"
import type { Activity } from "../domain/Activity.js"

/**
 * The activities delivered to each `websocket` channel, heard on any node of the cluster: what a socket
 * joined to `chat:channel:<id>` is pushed. Implemented in `cluster/` through the channel entity's stream.
 */
export class ChannelFeed extends Context.Tag("parley/ChannelFeed")<ChannelFeed, {
  /**
   * Listens to the channel's feed until the scope closes: every activity its loop hands over from when
   * this node follows the feed, in the order sent. Waits (a bounded time) until the node follows it, so
   * a delivery sent after this returns is heard. Nothing is replayed.
   */
  readonly listen: (channelId: string) => Effect.Effect<Stream.Stream<Activity>, never, Scope.Scope>
}>() {}
