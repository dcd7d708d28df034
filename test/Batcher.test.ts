import { expect, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
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
    // Callers whose wait ran out are not looked up any more. Every caller's timer started before the
    // first batch's (all 20 were queued before the consumer woke), so all ran out before that batch
    // was given up: it is the only one that ran `run`, and the 19 later batches found no one waiting.
    yield* Effect.sleep("1 second")
    expect(looked).toBe(1)
  }))

it.scopedLive("an interrupted caller (its client gone) is not looked up and leaves no timer behind", () =>
  Effect.gen(function*() {
    const timers = () => process.getActiveResourcesInfo().filter((resource) => resource === "Timeout").length
    const looked: Array<number> = []
    const gate = yield* Deferred.make<void>()
    const lookUp = yield* makeBatcher<number, number, string>({
      maxBatch: 100,
      concurrency: 1,
      // The first batch holds the only consumer until the gate opens.
      run: (keys) => Effect.sync(() => looked.push(...keys)).pipe(Effect.zipRight(Deferred.await(gate)), Effect.as(keys)),
      timeout: { ms: 5_000, onTimeout: () => "timed out" }
    })
    const first = yield* Effect.fork(lookUp(0))
    while (looked.length === 0) yield* Effect.sleep("10 millis")
    const before = timers()
    const callers = yield* Effect.forEach(Array.from({ length: 1000 }, (_, i) => i + 1), (i) => Effect.fork(lookUp(i)))
    yield* Effect.yieldNow()
    yield* Effect.forEach(callers, Fiber.interrupt, { discard: true })
    expect(timers() - before).toBeLessThan(10)
    yield* Deferred.succeed(gate, undefined)
    expect(yield* Fiber.join(first)).toBe(0)
    // Another batch would have run by now.
    yield* Effect.sleep("200 millis")
    expect(looked).toEqual([0])
  }))
