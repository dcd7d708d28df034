import { SqlClient } from "@effect/sql"
import { Context, Effect, Layer } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import Pg from "pg"

/** Where a test file's node keeps its data: a fresh PostgreSQL database, or an embedded one. */
export class TestDatabase extends Context.Tag("test/TestDatabase")<TestDatabase, {
  /** `DATABASE_URL` for the node, or undefined for the embedded database under `dataDir`. */
  readonly url: string | undefined
  readonly dataDir: string
}>() {}

/** The server tests run against (`DATABASE_URL`); without it, nodes use an embedded database. */
export const serverUrl = process.env["DATABASE_URL"]

const withClient = <A>(url: string, f: (client: Pg.Client) => Promise<A>) =>
  Effect.promise(async () => {
    const client = new Pg.Client({ connectionString: url })
    await client.connect()
    try {
      return await f(client)
    } finally {
      await client.end()
    }
  })

/** A database of its own for one test file, dropped afterwards. */
export const TestDatabaseLive = Layer.scoped(
  TestDatabase,
  Effect.gen(function*() {
    const dataDir = yield* Effect.acquireRelease(
      Effect.sync(() => mkdtempSync(join(tmpdir(), "parley-test-"))),
      (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
    )
    if (serverUrl === undefined) return { url: undefined, dataDir }
    const name = `parley_test_${crypto.randomUUID().replaceAll("-", "")}`
    yield* Effect.acquireRelease(
      withClient(serverUrl, (client) => client.query(`CREATE DATABASE ${name}`)),
      () => withClient(serverUrl, (client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
    )
    const url = new URL(serverUrl)
    url.pathname = `/${name}`
    return { url: url.toString(), dataDir }
  })
)

/**
 * Runs SQL on the test node's own database connection (PostgreSQL or the embedded one), to set up
 * rows and to check what was stored.
 */
export const query = <Row extends object = Record<string, unknown>>(text: string, values: ReadonlyArray<unknown> = []) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<Row>(text, values)).pipe(
    Effect.map((rows) => rows as ReadonlyArray<Row> as Array<Row>),
    Effect.orDie
  )

/**
 * Holds the conversation's row locked, as a write whose commit is still in flight does, until the
 * scope closes (then rolls back). Needs a server: the embedded database has one session.
 */
export const holdConversationRow = (conversationId: string) =>
  Effect.flatMap(TestDatabase, ({ url }) => {
    const holder = new Pg.Client({ connectionString: url! })
    return Effect.acquireRelease(
      Effect.promise(async () => {
        await holder.connect()
        await holder.query("BEGIN")
        await holder.query("SELECT 1 FROM conversations WHERE id = $1 FOR UPDATE", [conversationId])
      }),
      () => Effect.promise(() => holder.query("ROLLBACK").then(() => holder.end()))
    )
  })
