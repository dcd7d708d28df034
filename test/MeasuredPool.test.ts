import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { MeasuredPool } from "../src/db/MeasuredPool.js"
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
})
