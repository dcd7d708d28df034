import { EntityId, Sharding } from "@effect/cluster"
import { Effect } from "effect"
import { query } from "./TestDatabase.js"

/**
 * The runner port holding the shard of a conversation: the node whose connection holds the shard's
 * advisory lock (lock number 1,000,000 + shard for the first shard group); nodes name themselves
 * in `application_name`.
 */
export const ownerPort = (conversationId: string) =>
  Effect.gen(function*() {
    const sharding = yield* Sharding.Sharding
    const shard = sharding.getShardId(EntityId.make(conversationId), "default").id
    const rows = yield* query<{ application_name: string }>(
      `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
       WHERE l.locktype = 'advisory' AND l.granted AND l.objid = $1 AND a.datname = current_database()`,
      [1_000_000 + shard]
    )
    return Number(rows[0]?.application_name.split(":").pop())
  })
