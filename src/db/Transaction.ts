import type { SqlClient } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Effect, Option } from "effect"

/**
 * `sql.withTransaction`, except that a failed COMMIT or ROLLBACK is a `SqlError` (503), not the library's
 * defect (500), and a failed ROLLBACK after the body failed leaves the body's own error as the answer.
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
