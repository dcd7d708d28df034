import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { randomBytes } from "node:crypto"

/**
 * The installation's secret named `name` (32 random bytes, base64url), generated into
 * `installation_secrets` the first time. Nodes that start together may all generate one: the first
 * insert wins and every node reads the winner back.
 */
export const installationSecret = (name: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const generated = randomBytes(32).toString("base64url")
    yield* sql`INSERT INTO installation_secrets (name, value) VALUES (${name}, ${generated}) ON CONFLICT (name) DO NOTHING`
    const stored = yield* SqlSchema.single({
      Request: Schema.String,
      Result: Schema.Struct({ value: Schema.String }),
      execute: (name) => sql`SELECT value FROM installation_secrets WHERE name = ${name}`
    })(name).pipe(
      // The row was just inserted or already there: a missing or malformed one is a bug.
      Effect.catchTags({ ParseError: Effect.die, NoSuchElementException: Effect.die })
    )
    return stored.value
  })
