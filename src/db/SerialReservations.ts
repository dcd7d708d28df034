import { SqlClient } from "@effect/sql"
import type { Connection } from "@effect/sql/SqlConnection"
import { Effect, Layer, Stream } from "effect"

/**
 * A reserved connection whose statements run one at a time, queued here rather than in pg's queue, so a
 * statement given up while waiting is never sent and a cancellation hits only its own (ADR 0013).
 */
const oneAtATime = (connection: Connection): Connection => {
  const turn = Effect.unsafeMakeSemaphore(1)
  const serial = turn.withPermits(1)
  return {
    execute: (sql, params, transformRows) => serial(connection.execute(sql, params, transformRows)),
    executeRaw: (sql, params) => serial(connection.executeRaw(sql, params)),
    executeValues: (sql, params) => serial(connection.executeValues(sql, params)),
    executeUnprepared: (sql, params, transformRows) => serial(connection.executeUnprepared(sql, params, transformRows)),
    // A cursor keeps the session until its stream ends.
    executeStream: (sql, params, transformRows) =>
      Stream.unwrapScoped(
        Effect.uninterruptibleMask((restore) =>
          restore(turn.take(1)).pipe(Effect.zipRight(Effect.addFinalizer(() => turn.release(1))))
        ).pipe(Effect.as(connection.executeStream(sql, params, transformRows)))
      )
  }
}

/**
 * Closes the session of a reserved connection's pg client, so its pool drops it instead of handing it
 * out again; sent mid-statement, it takes effect when that statement ends.
 */
const endSession = (connection: Connection) =>
  Effect.sync(() => (connection as { readonly pg?: { end(callback: () => void): void } }).pg?.end(() => {}))

/**
 * `sql` whose reserved connections run one statement at a time and end their session with the
 * reservation: the cluster's shard-lock storage shares one from concurrent fibers (ADR 0013).
 */
export const serialReservations = (sql: SqlClient.SqlClient): SqlClient.SqlClient => {
  const serialized = Object.assign(
    // The client is also the tagged template that makes statements: a new function, as `sql` itself
    // is shared (@effect/sql caches it per connection acquirer).
    (...args: ReadonlyArray<unknown>) => (sql as unknown as (...args: ReadonlyArray<unknown>) => unknown)(...args),
    sql,
    {
      // The session holds advisory locks, and the runner storage's pg_advisory_unlock_all() before
      // the release is given up unsent when it waits for its turn past its deadline: given back to
      // the pool, the session would keep the node's shard locks. Ended, it frees them, and a
      // statement still queued for it fails instead of running in another user's session.
      reserve: Effect.flatMap(
        sql.reserve,
        (connection) => Effect.as(Effect.addFinalizer(() => endSession(connection)), oneAtATime(connection))
      )
    }
  ) as unknown as SqlClient.SqlClient
  return Object.assign(serialized, { safe: serialized })
}

/** The surrounding `SqlClient`, with reserved connections that run one statement at a time. */
export const SerialReservationsLive = Layer.effect(SqlClient.SqlClient, Effect.map(SqlClient.SqlClient, serialReservations))
