import type { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"

/**
 * `sql.withTransaction`, except that a COMMIT or ROLLBACK that fails (its connection lost or timed
 * out, the session ended by PostgreSQL) fails with its `SqlError` like any other statement: the
 * library makes it a defect, which would answer 500 where a database that cannot answer is 503.
 */
export const inTransaction = (sql: SqlClient.SqlClient) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
  sql.withTransaction(effect).pipe(
    Effect.catchSomeDefect((defect) => defect instanceof SqlError ? Option.some(Effect.fail(defect)) : Option.none())
  )
