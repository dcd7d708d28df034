import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Cross-node rate-limit counters: each node adds what it accepted in a window every
 * RATE_LIMIT_SYNC_MS and reads back the cluster's total. Counters are worth nothing after their
 * window, so the table is not WAL-logged.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE UNLOGGED TABLE rate_limit_counters (
      bucket text NOT NULL,
      key text NOT NULL,
      window_start bigint NOT NULL,
      count bigint NOT NULL CHECK (count >= 0),
      PRIMARY KEY (bucket, key, window_start)
    )`
})
