import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Fiber, Layer, Schedule, Scope } from "effect"
import { MeasuredPool } from "../src/db/MeasuredPool.js"
import { PreparingClient } from "../src/db/PreparedStatements.js"
import { serialReservations } from "../src/db/SerialReservations.js"
import { serverUrl } from "./support/TestDatabase.js"

/** A client on a pool built as Database.ts builds the node's, with serial reserved connections. */
const serialClient = Effect.gen(function*() {
  const pool = yield* Effect.acquireRelease(
    Effect.sync(() => new MeasuredPool({ connectionString: serverUrl, max: 4, Client: PreparingClient })),
    (pool) => Effect.promise(() => pool.end())
  )
  const sql = Context.get(yield* Layer.build(PgClient.layerFromPool({ acquire: Effect.succeed(pool) })), SqlClient.SqlClient)
  // Reserved as @effect/cluster's runner storage reserves its shard-lock connection.
  return { sql, serial: serialReservations(sql).withoutTransforms() }
})

/** Waits until the session `pid` runs a statement containing `text`. */
const running = (sql: SqlClient.SqlClient, pid: number, text: string) =>
  sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity
                     WHERE pid = ${pid} AND state = 'active' AND strpos(query, ${text}) > 0`.pipe(
    Effect.filterOrFail((rows) => rows[0]!.n > 0, () => "not running yet"),
    Effect.retry(Schedule.spaced("10 millis").pipe(Schedule.upTo("10 seconds"))),
    Effect.orDie
  )

/** Waits until the fiber is suspended (here: waiting for its statement's turn or its answer). */
const suspended = <A, E>(fiber: Fiber.RuntimeFiber<A, E>) =>
  Fiber.status(fiber).pipe(
    Effect.filterOrFail((status) => status._tag === "Suspended", () => "not suspended yet"),
    Effect.retry(Schedule.spaced("1 millis").pipe(Schedule.upTo("5 seconds"))),
    Effect.orDie
  )

describe.skipIf(serverUrl === undefined)("serial reserved connections", () => {
  // The shape of @effect/cluster's shard-lock connection: fibers share one session, and a deadline
  // interrupts one of them. In pg's queue the interrupted statement was cancelled by signalling the
  // session, which stopped the statement another fiber had running, and was still sent afterwards.
  it.scopedLive("a statement given up while another runs is never sent, and does not cancel the other", () =>
    Effect.gen(function*() {
      const { serial, sql } = yield* serialClient
      const connection = yield* serial.reserve
      const [[pid]] = (yield* connection.executeValues("SELECT pg_backend_pid()", [])) as [[number]]
      const key = Math.floor(Math.random() * 1_000_000_000)

      const other = yield* Effect.fork(connection.executeValues("SELECT 'answered' FROM pg_sleep(0.5)", []))
      yield* running(sql, pid, "pg_sleep(0.5)")
      const givenUp = yield* Effect.fork(connection.executeValues(`SELECT pg_advisory_lock(${key})`, []))
      yield* suspended(givenUp)
      expect(Exit.isInterrupted(yield* Fiber.interrupt(givenUp))).toBe(true)

      const answer = yield* Fiber.await(other)
      // Anything still queued for the session would have run before this statement.
      yield* connection.executeValues("SELECT 1", [])
      const held = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_locks
                                             WHERE locktype = 'advisory' AND objid = ${key} AND pid = ${pid}`
      yield* connection.executeValues("SELECT pg_advisory_unlock_all()", [])
      expect({ answer: Exit.isSuccess(answer) ? answer.value : String(answer.cause), held }).toEqual({
        answer: [["answered"]],
        held: [{ n: 0 }]
      })
    }), { timeout: 30_000 })

  it.scopedLive("a statement interrupted while it runs is cancelled, and the next waits for it and is answered", () =>
    Effect.gen(function*() {
      const { serial, sql } = yield* serialClient
      const connection = yield* serial.reserve
      const [[pid]] = (yield* connection.executeValues("SELECT pg_backend_pid()", [])) as [[number]]

      const long = yield* Effect.fork(connection.executeValues("SELECT 'finished' FROM pg_sleep(30)", []))
      yield* running(sql, pid, "pg_sleep(30)")
      const next = yield* Effect.fork(connection.executeValues("SELECT 'next'", []))
      yield* suspended(next)
      expect(Exit.isInterrupted(yield* Fiber.interrupt(long))).toBe(true)
      // Not 30 seconds: the long statement was cancelled, not waited for.
      expect(yield* Fiber.join(next).pipe(Effect.timeout("10 seconds"))).toEqual([["next"]])
    }), { timeout: 30_000 })

  // @effect/cluster gives its lock connection back (a rebuild, a shutdown) after a finalizer that runs
  // pg_advisory_unlock_all() within the lock-operation interval. Behind a statement still running
  // (a stalled lock operation, a burst of releases) that statement waits for its turn and is given
  // up unsent; in the pool the session would keep every shard lock of the node.
  it.scopedLive("a reservation ends its session: a given-up pg_advisory_unlock_all() leaves no lock behind in the pool", () =>
    Effect.gen(function*() {
      const { serial, sql } = yield* serialClient
      const reservation = yield* Scope.make()
      const connection = yield* serial.reserve.pipe(Scope.extend(reservation))
      yield* Scope.addFinalizer(
        reservation,
        connection.executeRaw("SELECT pg_advisory_unlock_all()", []).pipe(
          Effect.timeout("200 millis"),
          Effect.interruptible,
          Effect.catchAllCause(() => Effect.void)
        )
      )
      const [[pid]] = (yield* connection.executeValues("SELECT pg_backend_pid()", [])) as [[number]]
      const key = Math.floor(Math.random() * 1_000_000_000)
      yield* connection.executeValues(`SELECT pg_advisory_lock(${key})`, [])
      const stalled = yield* Effect.fork(connection.executeValues("SELECT pg_sleep(1)", []))
      yield* running(sql, pid, "pg_sleep(1)")

      yield* Scope.close(reservation, Exit.void)
      yield* Fiber.await(stalled)
      // The pool keeps an idle connection 10 s: a session given back would still hold the lock.
      const held = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_locks
                                             WHERE locktype = 'advisory' AND objid = ${key}`.pipe(
        Effect.filterOrFail((rows) => rows[0]!.n === 0, (rows) => rows),
        Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("5 seconds"))),
        Effect.catchAll((rows) => Effect.succeed(rows))
      )
      const session = yield* sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ${pid}`
      expect({ held, session }).toEqual({ held: [{ n: 0 }], session: [{ n: 0 }] })
    }), { timeout: 30_000 })

  it.scopedLive("fibers sharing a reserved connection each get their own answer", () =>
    Effect.gen(function*() {
      const { serial } = yield* serialClient
      const connection = yield* serial.reserve
      const answers = yield* Effect.forEach(
        Array.from({ length: 50 }, (_, i) => i),
        (i) => connection.executeValues("SELECT $1::int", [i]),
        { concurrency: "unbounded" }
      )
      expect(answers).toEqual(Array.from({ length: 50 }, (_, i) => [[i]]))
    }))
})
