import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Deleting a tenant or a channel removes its conversations at once and purges their activities
 * and deliveries in the background (server-apis.md; ADR 0008).
 *
 * Activities and deliveries no longer reference conversations or channels through foreign keys,
 * which cascaded every row in the deleting transaction. Only the append statement writes them, and
 * only for a conversation whose row it has just updated, so none is written for a missing one. A
 * deleted conversation's id is queued in `conversation_purges` by a trigger, whichever delete
 * removed it (tenant, channel), and the purge job deletes its rows in chunks.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE activities DROP CONSTRAINT activities_conversation_id_fkey`
  yield* sql`ALTER TABLE deliveries DROP CONSTRAINT deliveries_conversation_id_fkey`
  yield* sql`ALTER TABLE deliveries DROP CONSTRAINT deliveries_channel_id_fkey`
  yield* sql`
    CREATE TABLE conversation_purges (
      conversation_id uuid PRIMARY KEY,
      inserted_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`
    CREATE FUNCTION queue_conversation_purges() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      INSERT INTO conversation_purges (conversation_id) SELECT id FROM deleted ON CONFLICT DO NOTHING;
      RETURN NULL;
    END
    $$`
  yield* sql`
    CREATE TRIGGER conversations_queue_purges AFTER DELETE ON conversations
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION queue_conversation_purges()`
})
