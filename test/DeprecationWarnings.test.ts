import { describe, expect, it } from "@effect/vitest"
import { Effect, Logger, TestClock } from "effect"
import { DeprecationWarnings, MAX_REMEMBERED } from "../src/http/DeprecationWarnings.js"

/** Runs `effect` with a fresh service, and returns the annotations of each warning it logged. */
const warningsOf = <A, E>(effect: (warnings: DeprecationWarnings) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const logged: Array<Record<string, unknown>> = []
    const capture = Logger.make(({ annotations, message }) => {
      if (Array.isArray(message) && message[0] === "deprecated API used") logged.push(Object.fromEntries(annotations))
    })
    yield* Effect.flatMap(DeprecationWarnings, effect).pipe(
      Effect.provide(DeprecationWarnings.Default),
      Effect.provide(Logger.add(capture))
    )
    return logged
  })

const channel = "6f1c2a8e-0000-4000-8000-000000000001"

describe("DeprecationWarnings", () => {
  it.effect("one warning a minute per channel, however many uses", () =>
    Effect.gen(function*() {
      const logged = yield* warningsOf((warnings) =>
        Effect.gen(function*() {
          yield* Effect.repeatN(warnings.warn("x-channel-token", channel), 99)
          yield* TestClock.adjust("59 seconds")
          yield* warnings.warn("POST /api/v1/tokens", channel)
          yield* TestClock.adjust("1 second")
          yield* Effect.repeatN(warnings.warn("x-channel-token", channel), 9)
        })
      )
      expect(logged).toEqual([
        { surface: "x-channel-token", channel_id: channel },
        { surface: "x-channel-token", channel_id: channel }
      ])
    }))

  it.effect("without a channel, one warning a minute per surface", () =>
    Effect.gen(function*() {
      const logged = yield* warningsOf((warnings) =>
        Effect.gen(function*() {
          yield* Effect.repeatN(warnings.warn("opaque watermark", null), 9)
          yield* warnings.warn("another surface", null)
        })
      )
      expect(logged).toEqual([{ surface: "opaque watermark" }, { surface: "another surface" }])
    }))

  it.effect("remembers a bounded number of channels, forgetting the one warned longest ago", () =>
    Effect.gen(function*() {
      const logged = yield* warningsOf((warnings) =>
        Effect.gen(function*() {
          yield* Effect.forEach(Array.from({ length: MAX_REMEMBERED + 1 }, (_, i) => `channel-${i}`), (id) =>
            warnings.warn("x-channel-token", id), { discard: true })
          yield* warnings.warn("x-channel-token", `channel-${MAX_REMEMBERED}`)
          yield* warnings.warn("x-channel-token", "channel-0")
        })
      )
      expect(logged).toHaveLength(MAX_REMEMBERED + 2)
      expect(logged[MAX_REMEMBERED + 1]).toEqual({ surface: "x-channel-token", channel_id: "channel-0" })
    }))
})
