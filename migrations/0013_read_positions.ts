import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * How far each end user has read each conversation (client-api.md "Events", read receipts). No foreign
 * key, as for activities (ADR 0008): the purge job removes a deleted conversation's rows.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE read_positions (
      conversation_id uuid NOT NULL,
      user_id text NOT NULL,
      seq bigint NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (conversation_id, user_id)
    )`
})
