import { Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Schema } from "effect"
import { Activity } from "../src/domain/Activity.js"

/**
 * Starts the channel's delivery loop, or nudges the running one to look again; idempotent. With
 * `recheck` (the channel was changed by hand), a loop waiting for a known time looks at once instead.
 */
const Wake = Rpc.make("Wake", { payload: { recheck: Schema.optional(Schema.Boolean) } })

/** What the channel's feed stream carries: `Following` once subscribed, then each activity handed over. */
export const ChannelFeedItem = Schema.Union(
  Schema.TaggedStruct("Following", {}),
  Schema.TaggedStruct("Delivered", { activity: Activity })
)

/**
 * The activities the channel's `websocket` deliveries hand over from now on, in the order the loop sends
 * them; `Following` first, so a follower knows from when it hears them. Nothing is replayed.
 */
const Follow = Rpc.make("Follow", {
  success: ChannelFeedItem,
  stream: true
})

/** One entity per channel (entity id = channel id): it owns the channel's delivery loop, breaker and live feed. */
export const ChannelEntity = Entity.make("Channel", [Wake, Follow])
