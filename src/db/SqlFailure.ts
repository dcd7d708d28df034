import type { SqlError } from "@effect/sql/SqlError"
import { type Cause, Effect, type ParseResult } from "effect"
import { databaseUnavailable, type Unavailable } from "../domain/ApiError.js"

type Infrastructure = SqlError | ParseResult.ParseError | Cause.NoSuchElementException

const isInfrastructure = (u: unknown): u is Infrastructure =>
  typeof u === "object" && u !== null && "_tag" in u &&
  (u._tag === "SqlError" || u._tag === "ParseError" || u._tag === "NoSuchElementException")

/**
 * Maps what a repository can fail with besides domain errors: a failed statement is 503
 * `unavailable` (nothing committed), a row that breaks its schema or a missing RETURNING row is a bug.
 */
export const orUnavailable = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, Infrastructure> | Unavailable, R> =>
  Effect.catchIf(
    effect,
    (e): e is Extract<E, Infrastructure> => isInfrastructure(e),
    (e) => (e as Infrastructure)._tag === "SqlError" ? Effect.fail(databaseUnavailable()) : Effect.die(e)
  ) as Effect.Effect<A, Exclude<E, Infrastructure> | Unavailable, R>
