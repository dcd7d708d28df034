import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Outbound webhook signatures are keyed with the channel secret itself, which the hash cannot give
 * back: the secret is also kept sealed (src/channels/ChannelSecrets.ts). Rows from before have none
 * until their secret is rotated.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE channels ADD COLUMN secret_sealed bytea`
})
