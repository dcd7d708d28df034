import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * What every append writes, made cheaper (ADR 0006).
 *
 * A delivery row hangs on its conversation, not on its activity. Both are written in one
 * statement, so the activity key added nothing but cost: checking it locks the activity row just
 * inserted, a WAL record per delivery (measured: the largest part of an append's database time).
 * The conversation row is already locked by the append's head update, so its check is cheap, and
 * deleting a conversation (or its channel, or tenant) still removes its deliveries.
 *
 * `conversations_channel_activity` served no query (lists page by `inserted_at`), yet every append
 * moves `updated_at` and so wrote an entry into it.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE deliveries DROP CONSTRAINT deliveries_activity_id_fkey`
  yield* sql`
    ALTER TABLE deliveries ADD CONSTRAINT deliveries_conversation_id_fkey
    FOREIGN KEY (conversation_id) REFERENCES conversations (id) ON DELETE CASCADE`
  yield* sql`DROP INDEX conversations_channel_activity`
})
