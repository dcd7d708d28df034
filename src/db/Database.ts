import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Option, Redacted, Runtime } from "effect"
import Pg from "pg"
import { AppConfig, MAX_TIMER_MS } from "../config/AppConfig.js"
import { EMBEDDED_POOL_SIZE, embeddedServer } from "./EmbeddedServer.js"
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
      // Long statements are cancelled and silent connections closed, so a request ends in 503 rather than
      // waiting for TCP, and a frozen node's transactions do not keep their row locks (ADR 0011).
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
 * A client with its own `connections` for short keyed statements (writer, counters), each bounded by
 * `timeouts` (ADR 0006); on the embedded database, the node's client.
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
