import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { holdOpenRequest } from "./support/RawHttp.js"
import { type Child, programLines, readiness, spawnInRepo, waitUntilReady } from "./support/Spawn.js"
import { serverUrl, TestDatabase, TestDatabaseLive } from "./support/TestDatabase.js"
import { ADMIN_TOKEN, freePort } from "./support/TestNode.js"

/** What `npm start` needs beyond its defaults; no DATABASE_URL unless a test adds one. */
const nodeEnv = (port: number, extra: Record<string, string>) => ({
  PORT: String(port),
  HOST: "127.0.0.1",
  ADMIN_API_TOKEN: ADMIN_TOKEN,
  LOG_LEVEL: "warning",
  ...extra
})

/** The real `npm start`, ready to serve; the scope kills it if it is still running. */
const startNode = (env: Record<string, string>) =>
  Effect.gen(function*() {
    const port = yield* freePort
    const child = yield* spawnInRepo("npm", ["start"], nodeEnv(port, env))
    const baseUrl = `http://127.0.0.1:${port}`
    yield* waitUntilReady(child, baseUrl)
    return { child, baseUrl }
  }).pipe(
    // A port free when picked can be taken before the node binds it (the node exits at once, and
    // the scope still stops it): another pick is as good.
    Effect.retry({ times: 3, while: (error) => error.message.includes("EADDRINUSE") })
  )

const adminCall = (baseUrl: string, method: string, path: string, body?: unknown) =>
  Effect.promise(async () => {
    const response = await fetch(`${baseUrl}/api/v1/admin${path}`, {
      method,
      headers: { authorization: `Bearer ${ADMIN_TOKEN}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
    return { status: response.status, body: await response.json() as { data: { id: string; name: string } } }
  })

/**
 * Sends SIGTERM (as an orchestrator does to the container's first process) or SIGINT (Ctrl-C) to
 * `npm start`, again after `repeatAfterMs` when given, and records what readiness answers until
 * nothing answers any more. Waits for the exit, at most `drainMaxMs` and a little for npm itself
 * to finish.
 */
const stopAndWatch = (
  child: Child,
  baseUrl: string,
  drainMaxMs: number,
  signal: "SIGTERM" | "SIGINT" = "SIGTERM",
  repeatAfterMs?: number
) =>
  Effect.gen(function*() {
    child.process.kill(signal)
    const startedAt = Date.now()
    let repeated = repeatAfterMs === undefined
    const seen: Array<string> = []
    while (child.process.exitCode === null) {
      if (!repeated && Date.now() - startedAt >= repeatAfterMs!) {
        child.process.kill(signal)
        repeated = true
      }
      const answer = yield* readiness(baseUrl)
      if (answer === null) break
      seen.push(`${answer.status} ${answer.state}${answer.connection === "close" ? " (connection: close)" : ""}`)
      yield* Effect.sleep("100 millis")
    }
    return { code: yield* child.exited, seen }
  }).pipe(
    Effect.timeoutFail({
      duration: Duration.millis(drainMaxMs + 5000),
      onTimeout: () => new Error(`still running after DRAIN_MAX_MS:\n${child.stderr()}`)
    })
  )

const TempDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "parley-process-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

describe("the node as a process", () => {
  it.live(
    "npm start runs on the embedded database, drains on SIGTERM and on SIGINT, exits 0 and keeps its data",
    () =>
      Effect.gen(function*() {
        const dataDir = yield* TempDir
        const env = { DATA_DIR: dataDir, DRAIN_REFUSE_MS: "1500", DRAIN_MAX_MS: "10000" }

        const first = yield* startNode(env)
        const created = yield* adminCall(first.baseUrl, "POST", "/tenants", { tenant: { name: "Persisted" } })
        expect(created.status).toBe(201)
        const id = created.body.data.id
        const read = yield* adminCall(first.baseUrl, "GET", `/tenants/${id}`)
        expect(read.status).toBe(200)
        expect(read.body.data.name).toBe("Persisted")

        // The signal sent twice (an impatient supervisor): the second neither cuts the drain short
        // nor changes the exit code.
        const stopped = yield* stopAndWatch(first.child, first.baseUrl, 10000, "SIGTERM", 500)
        expect(stopped.code).toBe(0)
        // Draining answers close their connection, so that none is left for the next request.
        expect(stopped.seen).toContain("503 draining (connection: close)")
        // Once draining, the node never reports ready again.
        expect(stopped.seen.slice(stopped.seen.indexOf("503 draining (connection: close)"))).not.toContain("200 ready")
        expect(programLines(first.child.stderr())).toEqual([])

        const second = yield* startNode(env)
        const again = yield* adminCall(second.baseUrl, "GET", `/tenants/${id}`)
        expect(again.status).toBe(200)
        expect(again.body.data.name).toBe("Persisted")
        // SIGINT drains the same way (CONTRACT.md §1).
        const interrupted = yield* stopAndWatch(second.child, second.baseUrl, 10000, "SIGINT")
        expect(interrupted.code).toBe(0)
        expect(interrupted.seen).toContain("503 draining (connection: close)")
      }).pipe(Effect.scoped),
    120_000
  )

  it.live(
    "an exception nothing catches is logged as one fatal line in the node's format, and the process exits 1",
    () =>
      Effect.gen(function*() {
        const dataDir = yield* TempDir
        const trigger = join(dataDir, "throw-now")
        const preload = fileURLToPath(new URL("./support/ThrowWhenFileExists.mjs", import.meta.url))
        const node = yield* startNode({ DATA_DIR: dataDir, NODE_OPTIONS: `--import=${preload}`, PARLEY_TEST_THROW_WHEN: trigger })
        writeFileSync(trigger, "")
        expect(yield* node.child.exited.pipe(Effect.timeout("30 seconds"))).toBe(1)
        const fatal = node.child.stdout().split("\n").filter((line) => line.includes("\"FATAL\""))
        expect(fatal).toHaveLength(1)
        expect(JSON.parse(fatal[0]!)).toMatchObject({ message: "uncaught exception, the process exits" })
        expect(fatal[0]).toContain("thrown in a callback nothing catches")
      }).pipe(Effect.scoped),
    60_000
  )

  // PGlite takes no lock of its own: a second node on the same directory served its own writes,
  // and whichever stopped last overwrote the other's.
  it.live(
    "a second node on the same DATA_DIR refuses to start; a lock left by a killed node is taken over",
    () =>
      Effect.gen(function*() {
        const dataDir = yield* TempDir
        const env = { DATA_DIR: dataDir, DRAIN_REFUSE_MS: "0" }
        const first = yield* startNode(env)
        const second = yield* spawnInRepo("npm", ["start"], nodeEnv(yield* freePort, env))
        const code = yield* second.exited.pipe(
          Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => new Error("the second node kept running") })
        )
        expect(code).toBe(1)
        expect(second.stdout() + second.stderr()).toContain("is in use by process")
        expect((yield* readiness(first.baseUrl))?.status).toBe(200)

        // Killed, it leaves its lock behind: the next start takes it over.
        process.kill(-first.child.process.pid!, "SIGKILL")
        yield* first.child.exited
        const third = yield* startNode(env)
        expect((yield* readiness(third.baseUrl))?.status).toBe(200)
      }).pipe(Effect.scoped),
    120_000
  )

  it.live.skipIf(serverUrl === undefined)(
    "on PostgreSQL, SIGTERM with a request held open still exits 0 within DRAIN_MAX_MS",
    () =>
      Effect.gen(function*() {
        const { dataDir, url } = yield* TestDatabase
        const node = yield* startNode({
          DATABASE_URL: url ?? "",
          DATA_DIR: dataDir,
          DRAIN_REFUSE_MS: "500",
          DRAIN_MAX_MS: "3000"
        })
        // A request whose body never ends: the server is busy with it until the process stops.
        yield* holdOpenRequest(node.baseUrl, "/api/v1/admin/tenants", { authorization: `Bearer ${ADMIN_TOKEN}` })
        const stopped = yield* stopAndWatch(node.child, node.baseUrl, 3000)
        expect(stopped.code).toBe(0)
        expect(stopped.seen).toContain("503 draining (connection: close)")
      }).pipe(Effect.scoped, Effect.provide(TestDatabaseLive)),
    60_000
  )
})
