import { SqlClient } from "@effect/sql"
import { Context, Effect, Fiber, Layer, Option, Schedule } from "effect"
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
 * Runs `statement` in a transaction on a connection of its own and keeps it open, its locks held,
 * until the scope closes (then rolls back). Needs a server: the embedded database has one session.
 */
const holdLocks = (statement: string, values: ReadonlyArray<unknown> = []) =>
  Effect.flatMap(TestDatabase, ({ url }) => {
    const holder = new Pg.Client({ connectionString: url! })
    return Effect.acquireRelease(
      Effect.promise(async () => {
        await holder.connect()
        await holder.query("BEGIN")
        await holder.query(statement, values as Array<unknown>)
      }),
      () => Effect.promise(() => holder.query("ROLLBACK").then(() => holder.end()))
    )
  })

/**
 * Holds the row locked (`FOR UPDATE` unless told), as a write whose commit is still in flight does,
 * until the scope closes.
 */
export const holdRow = (table: "conversations" | "channels" | "api_keys", id: string, lock: "FOR UPDATE" | "FOR SHARE" = "FOR UPDATE") =>
  holdLocks(`SELECT 1 FROM ${table} WHERE id = $1 ${lock}`, [id])

/** Holds the whole table locked until the scope closes: every read of it waits meanwhile. */
export const holdTable = (table: "api_keys" | "blobs" | "activities") => holdLocks(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`)

/** Holds the conversation's row locked, as a write of it whose commit is still in flight does. */
export const holdConversationRow = (conversationId: string) => holdRow("conversations", conversationId)

/** How long `commitWhenWaiting` waits for its call to reach the lock: a bound for a stuck test, not a timing. */
const LOCK_WAIT_BOUND = "50 seconds"

/**
 * Runs `call` while `statements` (a delete, say) sit uncommitted in a transaction of a connection of
 * their own, and commits them once `call` waits for one of that transaction's locks. So `call` reads
 * the rows as they were until it needs a lock, and meets the change there, as a request racing a
 * concurrent commit does. It watches `pg_locks`, never a clock; a call that ends without waiting
 * fails the test (it raced nothing). Needs a server: the embedded database has one session.
 */
export const commitWhenWaiting = <A, E, R>(
  statements: ReadonlyArray<readonly [text: string, values: ReadonlyArray<unknown>]>,
  call: Effect.Effect<A, E, R>
) =>
  Effect.flatMap(TestDatabase, ({ url }) =>
    Effect.scoped(Effect.gen(function*() {
      const holder = new Pg.Client({ connectionString: url! })
      const pid = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          await holder.connect()
          await holder.query("BEGIN")
          for (const [text, values] of statements) await holder.query(text, values as Array<unknown>)
          const { rows } = await holder.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")
          return rows[0]!.pid
        }),
        // After a commit, ROLLBACK only warns.
        () => Effect.promise(() => holder.query("ROLLBACK").then(() => holder.end()))
      )
      const fiber = yield* Effect.fork(call)
      const waiting = query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_locks WHERE NOT granted AND $1::int = ANY(pg_blocking_pids(pid))",
        [pid]
      ).pipe(Effect.map((rows) => rows[0]!.n > 0))
      yield* Fiber.poll(fiber).pipe(
        Effect.filterOrDie(Option.isNone, () => new Error("the call ended without waiting for the transaction's locks")),
        Effect.zipRight(waiting),
        Effect.filterOrFail((blocked) => blocked, () => "not waiting yet"),
        Effect.retry(Schedule.spaced("10 millis").pipe(Schedule.upTo(LOCK_WAIT_BOUND))),
        Effect.orDieWith(() => new Error("the call never waited for the transaction's locks"))
      )
      yield* Effect.promise(() => holder.query("COMMIT"))
      return yield* Fiber.join(fiber)
    })))
