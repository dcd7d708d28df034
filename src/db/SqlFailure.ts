import type { SqlError } from "@effect/sql/SqlError"
import { type Cause, Effect, type ParseResult } from "effect"
import { BadRequest, databaseUnavailable, type Unavailable } from "../domain/ApiError.js"
import { isDataException, isUnavailable } from "./SqlErrors.js"

type Infrastructure = SqlError | ParseResult.ParseError | Cause.NoSuchElementException

const isInfrastructure = (u: unknown): u is Infrastructure =>
  typeof u === "object" && u !== null && "_tag" in u &&
  (u._tag === "SqlError" || u._tag === "ParseError" || u._tag === "NoSuchElementException")

/** A value of the request that PostgreSQL refuses to store or compare (see `isDataException`). */
const unstorableValue = () => new BadRequest({ message: "the request holds a value that cannot be stored" })

/**
 * Maps a repository's non-domain failures (ADR 0018): unavailable is 503, a value the database refused
 * 400; any other SQL error, a row breaking its schema or a missing RETURNING row is a defect.
 */
export const orUnavailable = <A, E, R>(
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, Exclude<E, Infrastructure> | Unavailable | BadRequest, R> =>
  Effect.catchIf(
    effect,
    (e): e is Extract<E, Infrastructure> => isInfrastructure(e),
    (e): Effect.Effect<never, Unavailable | BadRequest> =>
      e._tag !== "SqlError"
        ? Effect.die(e)
        : isDataException(e)
        ? Effect.fail(unstorableValue())
        : isUnavailable(e)
        ? Effect.fail(databaseUnavailable())
        : Effect.die(e)
  ) as Effect.Effect<A, Exclude<E, Infrastructure> | Unavailable | BadRequest, R>
