import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { dropInvalidIndexes } from "../src/db/InvalidIndexes.js"

/**
 * Deleting a channel, a participant or a portal user makes PostgreSQL find the rows that reference
 * it (to cascade or set null). Without an index leading with the referencing column that is a scan
 * of the whole table, every tenant's rows included: a channel delete read every conversation three
 * times and grew past the statement timeout with the installation, and then could never succeed
 * (a review measured 10 s for one channel of 2,000 participants, beside 400,000 other conversations).
 *
 * None of these columns changes on append, so conversation updates stay heap-only (ADR 0006).
 * `IF NOT EXISTS`: a large installation may build them beforehand with `CREATE INDEX CONCURRENTLY`
 * under these names, instead of holding writes to the tables while this migration builds them (one
 * such build that failed left an invalid index, which is dropped and built here).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* dropInvalidIndexes([
    "conversations_channel",
    "conversations_origin_channel",
    "conversation_channels_channel",
    "conversation_channels_participant",
    "portal_sessions_user",
    "routing_rules_source_channel"
  ])
  yield* sql`CREATE INDEX IF NOT EXISTS conversations_channel ON conversations (channel_id)`
  yield* sql`CREATE INDEX IF NOT EXISTS conversations_origin_channel ON conversations (origin_channel_id)`
  yield* sql`CREATE INDEX IF NOT EXISTS conversation_channels_channel ON conversation_channels (channel_id)`
  yield* sql`
    CREATE INDEX IF NOT EXISTS conversation_channels_participant ON conversation_channels (participant_id)
    WHERE participant_id IS NOT NULL`
  yield* sql`CREATE INDEX IF NOT EXISTS portal_sessions_user ON portal_sessions (user_id)`
  yield* sql`CREATE INDEX IF NOT EXISTS routing_rules_source_channel ON routing_rules (source_channel_id)`
})
