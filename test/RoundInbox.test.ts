import { describe, expect, it } from "@effect/vitest"
import { Cause, Deferred, Effect, Exit, Fiber, Logger, Scope } from "effect"
import { makeRoundInbox } from "../src/concurrency/RoundInbox.js"
import type { Reply } from "../src/concurrency/WorkQueue.js"

interface Numbered {
  readonly n: number
  readonly done: Reply<number, string>
}

const numbered = (n: number) => (done: Reply<number, string>): Numbered => ({ n, done })
const within = { ms: 5_000, onTimeout: () => "timeout" }

/** An inbox whose rounds are recorded, answer each command with its number, and wait for `gate` first. */
const recordingInbox = (gate: Deferred.Deferred<void>) =>
  Effect.gen(function*() {
    const rounds: Array<ReadonlyArray<number>> = []
    let forgotten = 0
    const inbox = yield* makeRoundInbox<Numbered>({
      round: (commands) =>
        Effect.gen(function*() {
          rounds.push(commands.map((c) => c.n))
          yield* Deferred.await(gate)
          if (commands.some((c) => c.n < 0)) return yield* Effect.die("a bug")
          for (const c of commands) c.done(Exit.succeed(c.n))
        }),
      take: (waiting) => waiting.length,
      refuse: (command) => command.done(Exit.fail("closed")),
      forget: () => forgotten++,
      defectMessage: "round failed"
    })
    return { inbox, rounds, forgotten: () => forgotten }
  })

describe("RoundInbox", () => {
  it.scoped("calls made while a round runs queue, and the next round takes them together", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const { inbox, rounds } = yield* recordingInbox(gate)
      // Idle: this call takes the turn and runs its round in its own fiber.
      const first = yield* Effect.fork(inbox.call(numbered(1), within))
      yield* Effect.yieldNow()
      expect(inbox.idle()).toBe(false)
      const rest = yield* Effect.forEach([2, 3, 4], (n) => Effect.fork(inbox.call(numbered(n), within)))
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(first)).toBe(1)
      expect(yield* Effect.forEach(rest, Fiber.join)).toEqual([2, 3, 4])
      expect(rounds).toEqual([[1], [2, 3, 4]])
      expect(inbox.idle()).toBe(true)
    }))

  it.scoped("a round that dies answers its commands with the defect; the inbox goes on", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      yield* Deferred.succeed(gate, undefined)
      const { forgotten, inbox } = yield* recordingInbox(gate)
      const died = yield* Effect.exit(inbox.call(numbered(-1)))
      expect(Exit.isFailure(died) && Cause.isDie(died.cause)).toBe(true)
      expect(forgotten()).toBe(1)
      expect(yield* inbox.call(numbered(5))).toBe(5)
    }).pipe(Effect.provide(Logger.remove(Logger.defaultLogger))))

  it.live("closing the inbox refuses the commands still waiting, and every later one", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const scope = yield* Scope.make()
      const { inbox } = yield* Scope.extend(recordingInbox(gate), scope)
      const running = yield* Effect.fork(inbox.call(numbered(1), within))
      yield* Effect.yieldNow()
      const waiting = yield* Effect.fork(inbox.call(numbered(2), within))
      yield* Effect.yieldNow()
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      expect(yield* Effect.flip(Fiber.join(waiting))).toBe("closed")
      expect(yield* Effect.flip(inbox.call(numbered(3)))).toBe("closed")
      // The round under way still ends with its answer.
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(running)).toBe(1)
      yield* Fiber.join(closing)
    }))
})
