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
 * Every append moves its conversation's `updated_at`. While `updated_at` was indexed, each such
 * update wrote a new entry into every index of the table. Now no index holds it:
 * `conversations_channel_activity` served no query (lists page by `inserted_at`), and the idle
 * check finds candidates by `activity_minute`, the minute of `updated_at`, which changes at most once
 * a minute. Updates within the minute are then heap-only (HOT): no index entries at all, given room
 * on the row's page, which the lower fill factor keeps.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE deliveries DROP CONSTRAINT deliveries_activity_id_fkey`
  yield* sql`
    ALTER TABLE deliveries ADD CONSTRAINT deliveries_conversation_id_fkey
    FOREIGN KEY (conversation_id) REFERENCES conversations (id) ON DELETE CASCADE`
  yield* sql`DROP INDEX conversations_channel_activity`
  yield* sql`DROP INDEX conversations_idle`
  yield* sql`ALTER TABLE conversations SET (fillfactor = 80)`
  yield* sql`
    ALTER TABLE conversations ADD COLUMN activity_minute bigint
    GENERATED ALWAYS AS (floor(extract(epoch FROM (updated_at AT TIME ZONE 'UTC')) / 60)) STORED`
  yield* sql`CREATE INDEX conversations_idle ON conversations (activity_minute) WHERE status = 'active'`
})
