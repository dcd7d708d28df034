import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { mkdirSync } from "node:fs"
import { createServer } from "node:net"
import { resolve } from "node:path"
import { lockDataDir } from "./DataDirLock.js"

/**
 * The node's pool size on the embedded database. PGlite runs every connection in one session, so
 * concurrent transactions would interleave in it: one connection makes the pool serialise them.
 */
export const EMBEDDED_POOL_SIZE = 1
/** Connections the socket server takes beyond the pool: with none to spare, a reconnect hangs. */
const SPARE_CONNECTIONS = 8

const freePort = Effect.async<number, SqlError>((resume) => {
  const server = createServer()
  server.once("error", (cause) => resume(Effect.fail(new SqlError({ cause, message: "no free port" }))))
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

/**
 * PGlite under `<dataDir>/pglite` behind a socket on 127.0.0.1, so `pg` and the cluster talk to it as to
 * any server. It must accept more connections than the pool opens: its default of one hangs.
 */
export const embeddedServer = (dataDir: string) =>
  Effect.gen(function*() {
    const directory = resolve(dataDir, "pglite")
    mkdirSync(directory, { recursive: true })
    yield* lockDataDir(directory)
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
          const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port, maxConnections: EMBEDDED_POOL_SIZE + SPARE_CONNECTIONS })
          await server.start()
          return server
        },
        catch: (cause) => new SqlError({ cause, message: "cannot start the embedded database socket" })
      }),
      (server) => Effect.promise(() => server.stop().catch(() => undefined))
    )
    return port
  })
