import { describe, expect, it } from "@effect/vitest"
import { hash } from "@node-rs/argon2"
import { Effect, Fiber, Option } from "effect"
import { hashPassword, passwordHashing, PASSWORD_HASH_PERMITS } from "../src/auth/Password.js"

describe("password hashing", () => {
  it.live("waits for a permit: with every permit taken, no hash runs", () =>
    Effect.gen(function*() {
      yield* passwordHashing.take(PASSWORD_HASH_PERMITS)
      const waiting = yield* Effect.fork(hashPassword("a passphrase long enough"))
      // Two hashes in a row outside the permits: time enough for a hash that did not wait.
      yield* Effect.promise(() => hash("another passphrase"))
      yield* Effect.promise(() => hash("another passphrase"))
      expect(Option.isNone(yield* Fiber.poll(waiting))).toBe(true)
      yield* passwordHashing.release(PASSWORD_HASH_PERMITS)
      expect(yield* Fiber.join(waiting)).toMatch(/^\$argon2id\$/)
    }))
})
