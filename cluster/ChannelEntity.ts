import { Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"

/** Starts the channel's delivery loop, or nudges the running one to look again; idempotent. */
const Wake = Rpc.make("Wake", {})

/** One entity per channel (entity id = channel id): it owns the channel's delivery loop and breaker. */
export const ChannelEntity = Entity.make("Channel", [Wake])
