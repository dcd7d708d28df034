import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The channel breaker's count of consecutive retryable failures, beside its state (ADR 0032): kept by
 * the loop that owns the channel when it changes, read by the next owner, so a move or a passivation
 * does not give a failing receiver a fresh count.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE channels ADD COLUMN circuit_failures integer NOT NULL DEFAULT 0`
})
