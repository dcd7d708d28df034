import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Effect, Layer, Option, Redacted, Runtime } from "effect"
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import { resolve } from "node:path"
import Pg from "pg"
import { AppConfig, MAX_TIMER_MS } from "../config/AppConfig.js"
import { MeasuredPool } from "./MeasuredPool.js"
import { PreparingClient } from "./PreparedStatements.js"
import { parseTimestamptz } from "./Timestamp.js"

/**
 * The node's connection pool, for readiness and metrics, and the pool of setup work (the setup
 * lock, migrations), whose statements may wait and run as long as they need.
 */
export class DatabasePool extends Context.Tag("parley/DatabasePool")<
  DatabasePool,
  { readonly pool: MeasuredPool; readonly setupPool: MeasuredPool; readonly embedded: boolean }
>() {}

const TIMESTAMPTZ_OID = 1184

/** Timestamps keep their microseconds; every other type is parsed as pg does. */
const types: Pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: "text" | "binary") =>
    oid === TIMESTAMPTZ_OID && format !== "binary"
      ? parseTimestamptz
      : Pg.types.getTypeParser(oid, format ?? "text")) as Pg.CustomTypesConfig["getTypeParser"]
}

const POOL_SIZE = 10
/** A connection that cannot be opened in this time fails its request (503) instead of holding it. */
const CONNECT_TIMEOUT_MS = 5000
/**
 * How much longer than `DATABASE_STATEMENT_TIMEOUT_MS` the node waits for an answer before it
 * closes the connection: the server's cancellation has to arrive first whenever it can.
 */
const ANSWER_MARGIN_MS = 2000
/** The setup lock's session and the migrator's; closed when idle, as setup happens once. */
const SETUP_POOL_SIZE = 2
const SETUP_IDLE_MS = 1000
// PGlite runs every connection in one session, so concurrent transactions would interleave in it:
// one connection makes the pool serialise them.
const EMBEDDED_POOL_SIZE = 1

const freePort = Effect.async<number, SqlError>((resume) => {
  const server = createServer()
  server.once("error", (cause) => resume(Effect.fail(new SqlError({ cause, message: "no free port" }))))
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

const acquirePool = (options: Pg.PoolConfig) =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const runtime = yield* Effect.runtime<never>()
      const pool = new MeasuredPool({ ...options, types, Client: PreparingClient })
      // An idle connection that dies (server restart, terminated backend) is dropped by the pool and
      // replaced at the next checkout; without a listener Node would treat it as an uncaught error.
      pool.on("error", (error) =>
        Runtime.runFork(runtime)(
          Effect.logWarning("idle database connection failed").pipe(Effect.annotateLogs("error", error.message))
        ))
      return pool
    }),
    (pool) => Effect.promise(() => pool.end().catch(() => undefined))
  )

/** Lock files this process holds: a pid tells processes apart, not nodes of one process (tests). */
const heldLocks = new Set<string>()

/**
 * Whether process `pid` runs (EPERM: as another user's). A zombie does not: a killed node whose
 * parent died too stays one where nothing reaps it (PID 1 of many containers), holding its pid.
 */
const isRunning = (pid: number) => {
  try {
    process.kill(pid, 0)
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.charAt(stat.lastIndexOf(")") + 2) !== "Z"
  } catch {
    return true // no /proc (not Linux): the signal's answer stands
  }
}

/** Creates `path` holding this process's pid; the pid of the live process holding it otherwise. */
const tryLock = (path: string): number | undefined => {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, String(process.pid), { flag: "wx" })
      return undefined
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
    }
    const holder = Number(readFileSync(path, "utf8").trim())
    // Our own pid in a lock no node of this process holds: left by a crashed start (a container
    // restarted gives its process the same pid again).
    const stale = !Number.isInteger(holder) || holder <= 0 || (holder === process.pid
      ? !heldLocks.has(path)
      : !isRunning(holder))
    if (!stale) return holder
    rmSync(path, { force: true })
  }
  throw new Error("another start took it over meanwhile")
}

/**
 * PGlite takes no lock on its directory: a second node started on the same `DATA_DIR` served too,
 * each answered writes the other never saw, and the one that closed last overwrote the other's
 * (acknowledged writes lost on restart). The node holds `pglite.lock`, its pid inside, while the
 * database is open; a lock whose process is gone (a crash) is taken over.
 */
const lockDirectory = (directory: string) => {
  const path = `${directory}.lock`
  return Effect.acquireRelease(
    Effect.try({
      try: () => tryLock(path),
      catch: (cause) => new SqlError({ cause, message: `cannot lock the embedded database (${path})` })
    }).pipe(
      Effect.filterOrFail(
        (holder) => holder === undefined,
        (holder) =>
          new SqlError({
            cause: undefined,
            message: `the embedded database in ${directory} is in use by process ${holder} (DATA_DIR serves one node; ` +
              `delete ${path} if that process is not a Parley node)`
          })
      ),
      Effect.tap(() => Effect.sync(() => heldLocks.add(path)))
    ),
    () =>
      Effect.sync(() => {
        heldLocks.delete(path)
        rmSync(path, { force: true })
      })
  )
}

/**
 * PGlite behind a local socket so that `pg` (and @effect/cluster) talk to it as to any server.
 * Everything is serialised in one session, so the socket server must accept more connections than
 * the pool opens (its default of one hangs).
 */
const embeddedServer = (dataDir: string) =>
  Effect.gen(function*() {
    const directory = resolve(dataDir, "pglite")
    mkdirSync(directory, { recursive: true })
    yield* lockDirectory(directory)
    const db = yield* Effect.acquireRelease(
      Effect.tryPromise({
        // Loaded only here: a node on PostgreSQL never pays for the WebAssembly database.
        try: () => import("@electric-sql/pglite").then(({ PGlite }) => PGlite.create(directory)),
        catch: (cause) => new SqlError({ cause, message: `cannot open the embedded database in ${directory}` })
      }),
      (db) => Effect.promise(() => db.close().catch(() => undefined))
    )
    const port = yield* freePort
    yield* Effect.acquireRelease(
      Effect.tryPromise({
        try: async () => {
          const { PGLiteSocketServer } = await import("@electric-sql/pglite-socket")
          const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port, maxConnections: EMBEDDED_POOL_SIZE + 8 })
          await server.start()
          return server
        },
        catch: (cause) => new SqlError({ cause, message: "cannot start the embedded database socket" })
      }),
      (server) => Effect.promise(() => server.stop().catch(() => undefined))
    )
    return port
  })

/** Connection settings for `DATABASE_URL`. */
const serverOptions = (config: AppConfig, databaseUrl: Redacted.Redacted): Pg.PoolConfig => ({
  connectionString: Redacted.value(databaseUrl),
  // Names the node in pg_stat_activity (and so the holder of each shard's advisory lock).
  application_name: `parley ${config.clusterRunnerHost}:${config.clusterRunnerPort}`
})

/** The node's pool: `DATABASE_URL`, or the embedded database under `DATA_DIR`. */
const PoolLive = Layer.scoped(
  DatabasePool,
  Effect.gen(function*() {
    const config = yield* AppConfig
    if (Option.isSome(config.databaseUrl)) {
      const server = serverOptions(config, config.databaseUrl.value)
      // Statements that run too long are cancelled, and a connection that goes silent (a frozen
      // host, a dead link: no error ever arrives) is closed, so a request ends in 503 and the
      // pool reconnects instead of waiting until TCP gives up, many minutes later. PostgreSQL ends
      // a transaction left waiting as long: a COMMIT held up on a stalled link until after the 503
      // finds it rolled back, and a frozen node's transactions do not keep their row locks.
      const pool = yield* acquirePool({
        ...server,
        max: POOL_SIZE,
        connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
        statement_timeout: config.databaseStatementTimeoutMs,
        // Within setTimeout's limit: pg's read timeout is a timer, and a longer one fires after 1 ms.
        query_timeout: Math.min(config.databaseStatementTimeoutMs + ANSWER_MARGIN_MS, MAX_TIMER_MS),
        idle_in_transaction_session_timeout: config.databaseStatementTimeoutMs,
        keepAlive: true
      })
      const setupPool = yield* acquirePool({
        ...server,
        max: SETUP_POOL_SIZE,
        idleTimeoutMillis: SETUP_IDLE_MS,
        connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
        keepAlive: true
      })
      return { pool, setupPool, embedded: false }
    }
    const port = yield* embeddedServer(config.dataDir)
    const pool = yield* acquirePool({
      host: "127.0.0.1",
      port,
      user: "postgres",
      database: "postgres",
      max: EMBEDDED_POOL_SIZE
    })
    return { pool, setupPool: pool, embedded: true }
  })
)

const clientLayer = (pool: Pg.Pool) => PgClient.layerFromPool({ acquire: Effect.succeed(pool), types })

const ClientLive = Layer.unwrapEffect(Effect.map(DatabasePool, ({ pool }) => clientLayer(pool)))

/** `SqlClient` on the setup pool, for migrations: a migration is not bound by the statement timeout. */
export const SetupClientLive = Layer.unwrapEffect(Effect.map(DatabasePool, ({ setupPool }) => clientLayer(setupPool)))

/**
 * A client of its own `connections` for short statements that reach their rows by key (the activity
 * writer, the rate-limit counters). PostgreSQL cancels a statement after `timeouts.statementMs`; one
 * left without an answer for `timeouts.queryMs` closes its connection, so a stalled backend or link
 * never holds up the next statement. Sequential scans are priced out, so a statement over a small
 * or freshly updated table still goes through its indexes (a scan per write grows with the table,
 * and updated rows leave dead versions to visit); prepared statements keep their generic plan
 * instead of being planned again whenever the values make a custom plan look cheaper. Its pool is
 * returned for metrics. On the embedded database (one session for everything) it is the node's
 * client, unbounded, with no pool of its own.
 */
export const boundedClient = (
  connections: number,
  timeouts: {
    readonly connectMs: number
    readonly statementMs: number
    readonly queryMs: number
    /** How long a statement waits for a row lock (55P03 after it); unset: up to `statementMs`. */
    readonly lockMs?: number
  }
) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    if (Option.isNone(config.databaseUrl)) {
      return { client: yield* SqlClient.SqlClient, pool: Option.none<MeasuredPool>() }
    }
    const pool = yield* acquirePool({
      ...serverOptions(config, config.databaseUrl.value),
      max: connections,
      connectionTimeoutMillis: timeouts.connectMs,
      statement_timeout: timeouts.statementMs,
      // The server cancels a statement; this bounds the wait for an answer that never comes (a
      // connection gone silent), after which the write's outcome is looked up, not guessed.
      query_timeout: timeouts.queryMs,
      idle_in_transaction_session_timeout: timeouts.statementMs,
      ...(timeouts.lockMs === undefined ? {} : { lock_timeout: timeouts.lockMs }),
      keepAlive: true,
      options: "-c enable_seqscan=off -c plan_cache_mode=force_generic_plan"
    })
    const client = Context.get(yield* Layer.build(clientLayer(pool)), SqlClient.SqlClient)
    return { client, pool: Option.some(pool) }
  })

/** `SqlClient`, `PgClient` and `DatabasePool` for the configured database. */
export const DatabaseLive = ClientLive.pipe(Layer.provideMerge(PoolLive))
