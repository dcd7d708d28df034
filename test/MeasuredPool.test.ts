import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { answerWithin } from "../src/concurrency/WorkQueue.js"
import { MeasuredPool } from "../src/db/MeasuredPool.js"
import { PreparingClient } from "../src/db/PreparedStatements.js"
import { serverUrl } from "./support/TestDatabase.js"

describe.skipIf(serverUrl === undefined)("measured pool", () => {
  // The readiness `pool` check reads this average: a pool whose checkouts are stuck must show,
  // not only one whose waits have ended.
  it.live("checkouts still waiting count in the average wait", () =>
    Effect.acquireUseRelease(
      Effect.sync(() => new MeasuredPool({ connectionString: serverUrl, max: 1 })),
      (pool) =>
        Effect.gen(function*() {
          const held = yield* Effect.promise(() => pool.connect())
          const waiting = [pool.connect(), pool.connect()]
          yield* Effect.sleep("600 millis")
          // The first checkout's short wait and two of about 600 ms so far.
          const average = pool.averageWaitMs(5_000)
          held.release()
          // One connection: each waiting checkout gets it once the one before gives it back.
          for (const checkout of waiting) (yield* Effect.promise(() => checkout)).release()
          expect(average).toBeGreaterThanOrEqual(300)
        }),
      (pool) => Effect.promise(() => pool.end())
    ))

  // Checkouts given up while they wait (a bounded read, a client gone) are each handed the next free
  // connection and give it back at once; pg then serves the next waiter within that same call.
  it.scopedLive("thousands of waiters given up while the pool is busy do not overflow the stack", () =>
    Effect.gen(function*() {
      const uncaught: Array<unknown> = []
      const onUncaught = (error: unknown) => uncaught.push(error)
      process.prependListener("uncaughtException", onUncaught)
      yield* Effect.addFinalizer(() => Effect.sync(() => process.off("uncaughtException", onUncaught)))
      // As Database.ts builds its small bounded pools.
      const pool = yield* Effect.acquireRelease(
        Effect.sync(() => new MeasuredPool({ connectionString: serverUrl, max: 2, Client: PreparingClient })),
        (pool) => Effect.promise(() => pool.end())
      )
      const sql = Context.get(yield* Layer.build(PgClient.layerFromPool({ acquire: Effect.succeed(pool) })), SqlClient.SqlClient)
      const busy = yield* Effect.fork(Effect.all([sql`SELECT pg_sleep(1.5)`, sql`SELECT pg_sleep(1.5)`], { concurrency: 2 }))
      yield* Effect.sleep("100 millis")
      yield* Effect.all(
        Array.from({ length: 5000 }, () => Effect.either(answerWithin(sql`SELECT 1`, 200, () => "slow" as const))),
        { concurrency: "unbounded", discard: true }
      )
      // The busy connections come back and pass through every given-up waiter.
      yield* busy.await.pipe(Effect.timeout("10 seconds"))
      expect(uncaught).toEqual([])
      // And the pool still serves.
      expect(yield* sql<{ one: number }>`SELECT 1 AS one`).toEqual([{ one: 1 }])
    }), { timeout: 60_000 })
})
