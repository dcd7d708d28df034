import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { dropInvalidIndexes } from "../src/db/InvalidIndexes.js"

/**
 * The hourly prune of the audit log (`AUDIT_RETENTION_DAYS`) deletes its oldest rows in chunks; this
 * index finds them without reading the whole log each time. `IF NOT EXISTS`: a large log's index may
 * be built beforehand with `CREATE INDEX CONCURRENTLY` under this name (if that build failed, the
 * invalid index it left is dropped and built here).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* dropInvalidIndexes(["audit_log_inserted_at"])
  yield* sql`CREATE INDEX IF NOT EXISTS audit_log_inserted_at ON audit_log (inserted_at)`
})
