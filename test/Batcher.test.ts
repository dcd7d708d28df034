import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { makeBatcher } from "../src/db/Batcher.js"

/** Lookups batched by src/db/Batcher.ts; `run` stands for a database that stopped answering. */
it.scopedLive("a caller waits no longer than the timeout from its call, however many batches are queued ahead", () =>
  Effect.gen(function*() {
    let looked = 0
    const lookUp = yield* makeBatcher<number, number, string>({
      maxBatch: 1,
      concurrency: 1,
      run: (keys) => Effect.zipRight(Effect.sync(() => (looked += keys.length)), Effect.never),
      timeout: { ms: 300, onTimeout: () => "timed out" }
    })
    const startedAt = Date.now()
    const answers = yield* Effect.all(
      Array.from({ length: 20 }, (_, i) => Effect.flip(lookUp(i))),
      { concurrency: "unbounded" }
    )
    expect(answers).toEqual(Array.from({ length: 20 }, () => "timed out"))
    // One batch at a time, each given up after 300 ms, would take 6 s for the last caller.
    expect(Date.now() - startedAt).toBeLessThan(3_000)
    // Callers whose wait ran out are not looked up any more.
    yield* Effect.sleep("1 second")
    expect(looked).toBeLessThan(20)
  }))
