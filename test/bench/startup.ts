/**
 * Start-up time and idle memory of `npm start`: from spawning it to the first 200 of
 * /health/ready, then the resident memory 3 s after ready and again once settled (BENCH_SETTLE_S,
 * default 45: V8's memory reducer gives back what start-up left in the young generation about
 * 30 s after allocation stops).
 *
 *   npx tsx test/bench/startup.ts          (or npm run bench:startup)
 *
 * With DATABASE_URL set, PostgreSQL is measured too, on a fresh database per run created and
 * dropped on that server. BENCH_RUNS (default 3) sets the runs per scenario.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect } from "effect"
import { cpus } from "node:os"
import { groupRss, spawnInRepo, waitUntilReady } from "../support/Spawn.js"
import { serverUrl, TestDatabase, TestDatabaseLive } from "../support/TestDatabase.js"
import { ADMIN_TOKEN, freePort } from "../support/TestNode.js"

const runs = Number(process.env["BENCH_RUNS"] ?? "3")
const SOON_AFTER_READY_S = 3
const SETTLED_AFTER_READY_S = Number(process.env["BENCH_SETTLE_S"] ?? "45")

interface Sample {
  readonly readyMs: number
  /** The node process serving (the larger of npm and node), 3 s after ready. */
  readonly serverRssKiB: number
  /** The same once settled. */
  readonly settledRssKiB: number
  /** npm and the node together, once settled. */
  readonly groupRssKiB: number
}

/** The serving process's RSS: the larger of npm and node. */
const serverRss = (processes: ReadonlyArray<{ readonly rssKiB: number }>) => Math.max(0, ...processes.map((p) => p.rssKiB))

/** One `npm start` on `env`: time to ready, RSS soon after and once settled, then a clean stop. */
const startOnce = (env: Record<string, string>) =>
  Effect.gen(function*() {
    const port = yield* freePort
    const baseUrl = `http://127.0.0.1:${port}`
    const started = performance.now()
    const child = yield* spawnInRepo("npm", ["start"], {
      PORT: String(port),
      HOST: "127.0.0.1",
      ADMIN_API_TOKEN: ADMIN_TOKEN,
      LOG_LEVEL: "warning",
      DRAIN_REFUSE_MS: "0",
      ...env
    })
    yield* waitUntilReady(child, baseUrl)
    const readyMs = performance.now() - started
    yield* Effect.sleep(`${SOON_AFTER_READY_S} seconds`)
    const soon = yield* groupRss(child)
    yield* Effect.sleep(`${Math.max(0, SETTLED_AFTER_READY_S - SOON_AFTER_READY_S)} seconds`)
    const settled = yield* groupRss(child)
    child.process.kill("SIGTERM")
    yield* child.exited
    return {
      readyMs,
      serverRssKiB: serverRss(soon),
      settledRssKiB: serverRss(settled),
      groupRssKiB: settled.reduce((sum, p) => sum + p.rssKiB, 0)
    } satisfies Sample
  }).pipe(Effect.scoped)

/**
 * Runs a scenario `runs` times, each on fresh data: a temp DATA_DIR, and for PostgreSQL a new
 * database. `restart` measures a second start on the data the first one made.
 */
const scenario = (embedded: boolean, restart: boolean) =>
  Effect.forEach(
    Array.from({ length: runs }),
    () =>
      Effect.gen(function*() {
        const { dataDir, url } = yield* TestDatabase
        const env = embedded || url === undefined ? { DATA_DIR: dataDir } : { DATA_DIR: dataDir, DATABASE_URL: url }
        if (restart) yield* startOnce(env)
        return yield* startOnce(env)
      }).pipe(Effect.provide(TestDatabaseLive)),
    { concurrency: 1 }
  )

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

const mib = (kib: number) => `${(kib / 1024).toFixed(0)} MiB`

const row = (name: string, samples: ReadonlyArray<Sample>) => {
  const ready = samples.map((s) => s.readyMs)
  return `| ${name} | ${median(ready).toFixed(0)} ms (${Math.min(...ready).toFixed(0)}–${
    Math.max(...ready).toFixed(0)
  }) | ${mib(median(samples.map((s) => s.serverRssKiB)))} | ${mib(median(samples.map((s) => s.settledRssKiB)))} | ${
    mib(median(samples.map((s) => s.groupRssKiB)))
  } |`
}

const program = Effect.gen(function*() {
  const scenarios: Array<readonly [string, boolean, boolean]> = [
    ["embedded (PGlite), first start", true, false],
    ["embedded (PGlite), restart", true, true]
  ]
  if (serverUrl !== undefined) {
    scenarios.push(["PostgreSQL, new database", false, false], ["PostgreSQL, restart", false, true])
  }
  const lines = [
    `npm start → /health/ready 200; median of ${runs} (min–max)`,
    `node ${process.version}, ${cpus().length} CPUs`,
    "",
    `| scenario | ready after | node RSS ${SOON_AFTER_READY_S} s after ready | node RSS settled (${SETTLED_AFTER_READY_S} s) | npm + node RSS settled |`,
    "|---|---|---|---|---|"
  ]
  for (const [name, embedded, restart] of scenarios) {
    yield* Console.error(`measuring: ${name}`)
    lines.push(row(name, yield* scenario(embedded, restart)))
  }
  if (serverUrl === undefined) lines.push("", "PostgreSQL skipped: set DATABASE_URL to measure it.")
  yield* Console.log(lines.join("\n"))
})

NodeRuntime.runMain(program)
