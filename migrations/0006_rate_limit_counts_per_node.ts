import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Each node keeps its own row per window, holding everything it accepted there (ADR 0005). Writing
 * an absolute count makes a sync safe to repeat: a sync whose answer was lost after it committed
 * used to add its counts a second time. The shared count is the sum over the nodes.
 *
 * Counters only matter for the windows that are live; those counted before the upgrade are dropped,
 * which at worst lets one window through again (as a PostgreSQL crash does to this unlogged table).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  // Nodes of the build before write until they stop: none of their rows may slip in meanwhile.
  yield* sql`LOCK TABLE rate_limit_counters IN ACCESS EXCLUSIVE MODE`
  yield* sql`DELETE FROM rate_limit_counters`
  yield* sql`ALTER TABLE rate_limit_counters ADD COLUMN node uuid NOT NULL`
  yield* sql`ALTER TABLE rate_limit_counters DROP CONSTRAINT rate_limit_counters_pkey`
  yield* sql`ALTER TABLE rate_limit_counters ADD PRIMARY KEY (bucket, key, window_start, window_end, node)`
})
