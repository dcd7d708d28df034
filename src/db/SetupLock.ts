import { SqlError } from "@effect/sql/SqlError"
import { Effect, Layer } from "effect"
import { DatabasePool } from "./Database.js"

/** The advisory lock nodes take while they set up shared storage (distinct from the shard locks). */
export const SETUP_LOCK = 7_340_001

/**
 * Builds `layer` under a database-wide advisory lock (on the setup pool: no statement timeout), so
 * nodes started together set up tables one at a time; racing, a node died on a duplicate type.
 */
export const oneNodeAtATime = <ROut, E, RIn>(layer: Layer.Layer<ROut, E, RIn>) =>
  Layer.scopedContext(Effect.gen(function*() {
    const { embedded, setupPool } = yield* DatabasePool
    if (embedded) return yield* Layer.build(layer)
    const connect = Effect.tryPromise({
      try: () => setupPool.connect(),
      catch: (cause) => new SqlError({ cause, message: "cannot open a connection for the setup lock" })
    })
    // The connection goes back to the pool once the layer has started; the layer lives on.
    return yield* Effect.acquireUseRelease(connect, (session) => {
      const query = (text: string) =>
        Effect.tryPromise({
          try: () => session.query(text, [SETUP_LOCK]),
          catch: (cause) => new SqlError({ cause, message: "the setup lock failed" })
        })
      return query("SELECT pg_advisory_lock($1)").pipe(
        Effect.zipRight(Layer.build(layer).pipe(Effect.ensuring(Effect.ignore(query("SELECT pg_advisory_unlock($1)")))))
      )
    }, (session) => Effect.sync(() => session.release()))
  }))
