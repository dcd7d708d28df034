import { Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Schema } from "effect"

/**
 * Starts the channel's delivery loop, or nudges the running one to look again; idempotent. With
 * `recheck` (the channel was changed by hand), a loop waiting for a known time looks at once instead.
 */
const Wake = Rpc.make("Wake", { payload: { recheck: Schema.optional(Schema.Boolean) } })

/** One entity per channel (entity id = channel id): it owns the channel's delivery loop and breaker. */
export const ChannelEntity = Entity.make("Channel", [Wake])
