import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A delivery row hangs on its conversation, not on its activity. Both are written in one
 * transaction, so the activity key added nothing but cost: checking it locks the activity row just
 * inserted, a WAL record per delivery (measured: the largest part of an append's database time).
 * The conversation row is already locked by the append's head update, so its check is cheap, and
 * deleting a conversation (or its channel, or tenant) still removes its deliveries.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE deliveries DROP CONSTRAINT deliveries_activity_id_fkey`
  yield* sql`
    ALTER TABLE deliveries ADD CONSTRAINT deliveries_conversation_id_fkey
    FOREIGN KEY (conversation_id) REFERENCES conversations (id) ON DELETE CASCADE`
})
