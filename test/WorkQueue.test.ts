import { expect, it } from "@effect/vitest"
import { Effect, Exit, Fiber } from "effect"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { awaitReply, type Reply } from "../src/concurrency/WorkQueue.js"

// A full collection on demand, to see what a kept reply still holds.
setFlagsFromString("--expose-gc")
const collectGarbage = runInNewContext("gc") as () => void

it.live("a reply, once given, no longer holds the fiber that waited for it", () =>
  Effect.gen(function*() {
    // A consumer keeps the reply past its use, as a finished write batch keeps its callers' replies
    // until it is collected: with the fiber reachable from it, every answered caller was kept
    // as long, and promoted to the old generation under load.
    let kept: Reply<number, never> | undefined
    let waiter: Fiber.RuntimeFiber<number> | undefined = yield* Effect.fork(awaitReply<number, never>((reply) => (kept = reply)))
    const collected = new WeakRef(waiter)
    yield* Effect.yieldNow()
    kept!(Exit.succeed(1))
    expect(yield* Fiber.join(waiter)).toBe(1)
    waiter = undefined
    // A later task: a WeakRef's target is kept until the task that made it ends.
    yield* Effect.sleep("10 millis")
    collectGarbage()
    expect(kept).toBeDefined()
    expect(collected.deref()).toBeUndefined()
  }))

it.live("only the first of two replies counts", () =>
  Effect.gen(function*() {
    const replies: Array<Reply<string, never>> = []
    const waiter = yield* Effect.fork(awaitReply<string, never>((reply) => replies.push(reply, reply)))
    yield* Effect.yieldNow()
    replies[0]!(Exit.succeed("first"))
    replies[1]!(Exit.succeed("second"))
    expect(yield* Fiber.join(waiter)).toBe("first")
  }))
