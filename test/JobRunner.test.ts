import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, HashMap, Logger, LogLevel, Option, Scope, TestClock } from "effect"
import { JobRunner } from "../src/ops/JobRunner.js"

/** The runner's log lines, as message, level and `job` annotation. */
const collectLogs = () => {
  const lines: Array<{ readonly message: string; readonly level: string; readonly job: unknown }> = []
  const collector = Logger.make(({ annotations, logLevel, message }) =>
    lines.push({
      message: String(message),
      level: logLevel.label,
      job: Option.getOrUndefined(HashMap.get(annotations, "job"))
    })
  )
  return { lines, layer: Logger.add(collector) }
}

describe("JobRunner", () => {
  it.scoped("a failing run is logged with the job's name and retried at the next tick", () => {
    const logs = collectLogs()
    return Effect.gen(function*() {
      const jobs = yield* JobRunner
      let runs = 0
      yield* jobs.every("flaky", "1 minute", Effect.suspend(() => (++runs === 1 ? Effect.fail("boom") : Effect.void)))
      yield* TestClock.adjust("0 millis")
      expect(runs).toBe(1)
      expect(logs.lines).toEqual([{ message: "background job failed", level: "WARN", job: "flaky" }])
      yield* TestClock.adjust("1 minute")
      expect(runs).toBe(2)
      yield* TestClock.adjust("1 minute")
      expect(runs).toBe(3)
      expect(yield* jobs.isRunning).toBe(true)
    }).pipe(Effect.provide([JobRunner.Default, logs.layer, Logger.minimumLogLevel(LogLevel.Info)]))
  })

  it.scoped("a job whose fiber is stopped from outside makes isRunning false, logged with its name", () => {
    const logs = collectLogs()
    return Effect.gen(function*() {
      const jobs = yield* JobRunner
      const running = yield* Deferred.make<Fiber.RuntimeFiber<unknown, unknown>>()
      yield* jobs.every("other", "1 minute", Effect.void)
      yield* jobs.every(
        "victim",
        "1 minute",
        Effect.withFiberRuntime<void>((fiber) => Effect.asVoid(Deferred.succeed(running, fiber)))
      )
      expect(yield* jobs.isRunning).toBe(true)
      yield* Fiber.interrupt(yield* Deferred.await(running))
      expect(yield* jobs.isRunning).toBe(false)
      expect(logs.lines).toEqual([{ message: "background job stopped", level: "ERROR", job: "victim" }])
    }).pipe(Effect.provide([JobRunner.Default, logs.layer, Logger.minimumLogLevel(LogLevel.Info)]))
  })

  it.effect("a loop stopped by the closing of its scope is not a death, and runs no more", () =>
    Effect.gen(function*() {
      const jobs = yield* JobRunner
      const scope = yield* Scope.make()
      let runs = 0
      yield* jobs.every("scoped", "1 second", Effect.sync(() => void runs++), { fixedRate: true }).pipe(Scope.extend(scope))
      yield* TestClock.adjust("2 seconds")
      expect(runs).toBe(3)
      yield* Scope.close(scope, Exit.void)
      yield* TestClock.adjust("5 seconds")
      expect(runs).toBe(3)
      expect(yield* jobs.isRunning).toBe(true)
    }).pipe(Effect.provide(JobRunner.Default)))
})
