import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * A shared rate-limit counter knows when its window ends (ADR 0005). Pruning by the start of a
 * window could not tell a day-long tenant window from an expired second-long one, and deleted the
 * first while it still counted. The end is part of the key: a window whose length changed meanwhile
 * is a window of its own, not one whose count it inherits.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE rate_limit_counters ADD COLUMN window_end bigint`
  // The horizon the earlier pruning assumed for every window.
  yield* sql`UPDATE rate_limit_counters SET window_end = window_start + 7200000`
  yield* sql`ALTER TABLE rate_limit_counters ALTER COLUMN window_end SET NOT NULL`
  yield* sql`ALTER TABLE rate_limit_counters DROP CONSTRAINT rate_limit_counters_pkey`
  yield* sql`ALTER TABLE rate_limit_counters ADD PRIMARY KEY (bucket, key, window_start, window_end)`
  yield* sql`CREATE INDEX rate_limit_counters_window_end ON rate_limit_counters (window_end)`
})
