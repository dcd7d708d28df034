import type { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"

/**
 * `sql.withTransaction`, except that a COMMIT or ROLLBACK that fails (its connection lost or timed
 * out, the session ended by PostgreSQL) fails with its `SqlError` like any other statement: the
 * library makes it a defect, which would answer 500 where a database that cannot answer is 503.
 * A ROLLBACK after the body failed commits nothing whether it runs or not, so the body's own error
 * (a 404, a 412) stays the answer: the library would replace it with the ROLLBACK's.
 */
export const inTransaction = (sql: SqlClient.SqlClient) =>
<A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | SqlError, R> =>
  Effect.suspend(() => {
    let failed: Option.Option<E> = Option.none()
    return sql.withTransaction(Effect.tapError(effect, (error) => Effect.sync(() => (failed = Option.some(error))))).pipe(
      Effect.catchSomeDefect((defect) =>
        defect instanceof SqlError ? Option.some(Effect.fail(Option.getOrElse(failed, () => defect))) : Option.none()
      )
    )
  })
