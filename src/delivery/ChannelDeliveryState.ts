import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { orUnavailable } from "../db/SqlFailure.js"
import { CircuitState } from "../domain/Delivery.js"

/** A channel's breaker as stored, and the version of that row to poll for changes. */
export const StoredBreaker = Schema.Struct({
  circuit_state: CircuitState,
  /** `channels.updated_at`: moves with every pause, resume and breaker change (and channel edit). */
  version: Schema.String
})
export type StoredBreaker = typeof StoredBreaker.Type

const decode = Schema.decodeUnknown(Schema.Array(StoredBreaker))

/**
 * The stored breaker of a channel, for the one that sends its deliveries (the channel entity).
 * `channels.circuit_state` is the truth shared by nodes: pause and resume write it from any node;
 * the owner reads it with `get` before it sends (or when `version` moved), and writes its own
 * transitions with `record`, which never overrides a pause (docs/delivery/routes.md).
 */
export class ChannelDeliveryState extends Effect.Service<ChannelDeliveryState>()("parley/ChannelDeliveryState", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** The channel's stored breaker; none when the channel is gone. */
    const get = (channelId: string) =>
      sql`SELECT circuit_state, updated_at AS version FROM channels WHERE id = ${channelId}`.pipe(
        Effect.flatMap(decode),
        Effect.map((rows) => Option.fromNullable(rows[0])),
        orUnavailable
      )

    /**
     * The owner's own transition (`open`, `half_open`, `closed`): written unless the channel is
     * paused, which only a resume ends. Returns the state stored afterwards (none: channel gone).
     */
    const record = (channelId: string, state: "open" | "half_open" | "closed") =>
      sql`
        UPDATE channels SET circuit_state = ${state}, updated_at = now()
        WHERE id = ${channelId} AND circuit_state NOT IN ('paused', ${state})`.pipe(
        Effect.zipRight(get(channelId)),
        orUnavailable
      )

    return { get, record } as const
  })
}) {}
