/**
 * `npm run bench`: appends over HTTP through the tenant and client APIs, and revocation propagation.
 * A tool, not a test (see test/bench/README.md).
 *
 * On a fresh database (`CREATE DATABASE parley_bench_<random>` on DATABASE_URL, dropped at the end)
 * it starts a Parley node as a child process, creates one tenant (activity_create limit raised), one
 * webhook channel and K conversations, and drives `POST /api/v1/conversations/:id/activities` with C
 * concurrent keep-alive clients: a warm-up, then a measured window; the same load through the client
 * API (`POST /api/v1/chat/conversations/:id/activities`, a conversation-bound token per conversation);
 * then the same C clients on one conversation. Parley is stopped, and the same load goes to a minimal node:http + pg server doing
 * one plain INSERT per request (test/bench/baseline-server.ts); with --rounds N, both N times in turn.
 * It prints one table (Parley's two APIs, its floor, round by round, then the single conversation), the
 * ratios, and the machine's core count and CPU model; then, on two nodes of their own, the revocation
 * propagation (test/bench/revocation-propagation.ts).
 *
 * Flags (or environment variables):
 *   --clients C        BENCH_CLIENTS        concurrent clients (64)
 *   --conversations K  BENCH_CONVERSATIONS  conversations the clients spread over (1000)
 *   --warmup S         BENCH_WARMUP_S       seconds of warm-up per scenario (3); it goes on until every
 *                                           conversation has had a request (60 s more at most)
 *   --duration S       BENCH_DURATION_S     measured seconds per scenario (10)
 *   --rounds N         BENCH_ROUNDS         Parley (both APIs, on one node, which first alternates) and
 *                                           its floor N times, alternately, each server started afresh
 *                                           (1); the targets are judged on the medians
 *   --only LIST        BENCH_ONLY           scenarios to run: parley,client,baseline,single,revocation (all)
 *   --revocations N    BENCH_REVOCATIONS    revocations the revocation scenario measures (100), once
 *   --idempotency-keys BENCH_IDEMPOTENCY_KEYS=1  every request carries a new x-idempotency-key, as
 *                                           careful clients send (the floor ignores it)
 *   --probe            BENCH_PROBE=1        preload test/bench/probe.ts into the servers: SQL statements,
 *                                           Effect fibers, GC and event-loop use per request, inside the
 *                                           window (BENCH_PROBE_OPS=1: Effect instructions as well)
 *   --cpu-profile DIR  BENCH_CPU_PROFILE    implies --probe: a .cpuprofile of each window (and a
 *                                           .heapprofile with BENCH_HEAP_PROFILE=1, or of what was
 *                                           promoted with BENCH_HEAP_PROFILE=promoted); read them with
 *                                           test/bench/profile-summary.ts
 *   DATABASE_URL       server to create the database on (postgres://postgres@127.0.0.1:5432/postgres)
 *
 * The load generator runs in this process and shares the machine's cores with the server and
 * PostgreSQL, so it is kept lean (node:http, one pre-built body, no JSON parsing of answers). The
 * CPU columns split the measured window's CPU time (in cores) between the server process, its
 * PostgreSQL backends, this load generator and everything else on the machine ("other": WAL writer,
 * checkpointer, kernel, and any unrelated process; a large value means the run was disturbed).
 */
import { randomUUID } from "node:crypto"
import { existsSync, readFileSync } from "node:fs"
import { Agent, request } from "node:http"
import os from "node:os"
import { resolve } from "node:path"
import { performance } from "node:perf_hooks"
import { type CounterRun, type Counters, countersAvailable, startCounters } from "./counters.js"
import type { ProbeReport } from "./probe.js"
import { machineBusy, percentile, processCpu } from "./measure.js"
import {
  call,
  type Child,
  freePort,
  parleyNodeArgs,
  type Probe,
  sleep,
  startChild,
  stopChild,
  stopChildren,
  tail,
  waitUntilServing,
  withDatabase
} from "./processes.js"
import { formatRevocationFigures, measureRevocationPropagation } from "./revocation-propagation.js"
import { expectStatus, interrupted, parleyEntry, type Run, runBench, setUpTenant, startParleyNode, startRun } from "./run.js"

/** Whether the server's instructions per request can be counted (perf stat) on this machine. */
const perfCounters = countersAvailable()
const POOL_SIZE = 10 // Parley's pool size (src/db/Database.ts); the baseline uses the same.
/** How much longer than asked a warm-up may run to reach every conversation once. */
const MAX_EXTRA_WARMUP_MS = 60_000
const BODY = Buffer.from(JSON.stringify({ text: "hello from the benchmark" }))

// ---------------------------------------------------------------------------------------------
// Options

const SCENARIOS = ["parley", "client", "baseline", "single", "revocation"] as const
type Scenario = (typeof SCENARIOS)[number]
const isScenario = (name: string): name is Scenario => (SCENARIOS as ReadonlyArray<string>).includes(name)

interface Options {
  readonly clients: number
  readonly conversations: number
  readonly warmupMs: number
  readonly durationMs: number
  /** Parley and its floor run this many times, alternately. */
  readonly rounds: number
  readonly only: ReadonlySet<Scenario>
  /** Revocations the `revocation` scenario measures. */
  readonly revocations: number
  /** The probe preloaded into the servers (`--probe`, `--cpu-profile`), or undefined. */
  readonly probe: Probe | undefined
  readonly idempotencyKeys: boolean
  readonly serverUrl: string
}

const usage = () => {
  console.log("usage: npm run bench -- [--clients C] [--conversations K] [--warmup S] [--duration S] " +
    "[--rounds N] [--only parley,client,baseline,single,revocation] [--revocations N] [--idempotency-keys] [--probe] [--cpu-profile DIR]")
}

const parseOptions = (argv: ReadonlyArray<string>): Options => {
  const flags = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (arg === "--help" || arg === "-h") {
      usage()
      process.exit(0)
    }
    if (!arg.startsWith("--")) throw new Error(`unexpected argument ${arg}`)
    const [name, inline] = arg.slice(2).split("=", 2) as [string, string | undefined]
    if (name === "probe" || name === "idempotency-keys") flags.set(name, inline ?? "1")
    else {
      const value = inline ?? argv[++i]
      if (value === undefined) throw new Error(`--${name} needs a value`)
      flags.set(name, value)
    }
  }
  const known = new Set(["clients", "conversations", "warmup", "duration", "rounds", "only", "revocations", "probe", "idempotency-keys", "cpu-profile"])
  for (const name of flags.keys()) if (!known.has(name)) throw new Error(`unknown flag --${name}`)

  const value = (flag: string, env: string) => flags.get(flag) ?? process.env[env]
  const positive = (flag: string, env: string, fallback: number) => {
    const text = value(flag, env)
    if (text === undefined) return fallback
    const n = Number(text)
    if (!Number.isFinite(n) || n <= 0) throw new Error(`--${flag} must be a positive number, got ${text}`)
    return n
  }
  const onlyText = value("only", "BENCH_ONLY") ?? SCENARIOS.join(",")
  const only = new Set<Scenario>()
  for (const name of onlyText.split(",").map((s) => s.trim()).filter((s) => s.length > 0)) {
    if (!isScenario(name)) throw new Error(`unknown scenario ${name}`)
    only.add(name)
  }
  const probeText = value("probe", "BENCH_PROBE")
  const keysText = value("idempotency-keys", "BENCH_IDEMPOTENCY_KEYS")
  const cpuProfile = value("cpu-profile", "BENCH_CPU_PROFILE")
  return {
    clients: Math.floor(positive("clients", "BENCH_CLIENTS", 64)),
    conversations: Math.floor(positive("conversations", "BENCH_CONVERSATIONS", 1000)),
    warmupMs: positive("warmup", "BENCH_WARMUP_S", 3) * 1000,
    durationMs: positive("duration", "BENCH_DURATION_S", 10) * 1000,
    rounds: Math.floor(positive("rounds", "BENCH_ROUNDS", 1)),
    only,
    revocations: Math.floor(positive("revocations", "BENCH_REVOCATIONS", 100)),
    probe: (probeText !== undefined && probeText !== "0") || cpuProfile !== undefined
      ? { cpuProfileDir: cpuProfile === undefined ? undefined : resolve(cpuProfile) }
      : undefined,
    idempotencyKeys: keysText !== undefined && keysText !== "0",
    serverUrl: process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/postgres"
  }
}

// ---------------------------------------------------------------------------------------------
// CPU accounting from /proc (Linux); zeros elsewhere.

/** How often the database's backends are read during a window. */
const BACKEND_SAMPLE_MS = 250

/**
 * CPU seconds the database's backends use from `start` on. Each backend counts its own difference,
 * read every `BACKEND_SAMPLE_MS`: one that exits during the window keeps what it used until its
 * last reading (its /proc entry is gone at the end: a plain before/after sum once subtracted its
 * whole lifetime), and one that connects during the window counts from its start.
 */
const backendCpu = (listBackends: () => Promise<ReadonlyArray<number>>) => {
  const first = new Map<number, number>()
  const last = new Map<number, number>()
  const read = (pid: number, isNew: boolean) => {
    const cpu = processCpu(pid)
    if (cpu === undefined) return
    if (!first.has(pid)) first.set(pid, isNew ? 0 : cpu)
    last.set(pid, cpu)
  }
  return {
    start: (pids: ReadonlyArray<number>) => pids.forEach((pid) => read(pid, false)),
    sample: () => [...last.keys()].forEach((pid) => read(pid, false)),
    /** The total, after a last reading and a look for backends that connected meanwhile. */
    finish: async () => {
      for (const pid of last.keys()) read(pid, false)
      for (const pid of await listBackends()) if (!first.has(pid)) read(pid, true)
      let total = 0
      for (const [pid, cpu] of last) total += cpu - first.get(pid)!
      return total
    }
  }
}

interface CpuSnapshot {
  readonly server: number
  readonly generator: number
  readonly machine: number
}

const snapshot = (serverPid: number): CpuSnapshot => ({
  server: processCpu(serverPid) ?? 0,
  generator: (() => {
    const usage = process.cpuUsage()
    return (usage.user + usage.system) / 1e6
  })(),
  machine: machineBusy()
})

// ---------------------------------------------------------------------------------------------
// Load generator

interface DriveResult {
  /** Latencies (ms) of the requests that completed inside the window. */
  readonly latencies: Float64Array
  readonly windowMs: number
  /** How long the warm-up really took. */
  readonly warmupMs: number
  /** Non-2xx answers and transport failures, warm-up included. */
  readonly errors: number
  readonly errorSamples: ReadonlyArray<string>
  readonly cpu: { readonly server: number; readonly pg: number; readonly generator: number; readonly other: number }
}

interface AppendRequest {
  readonly path: string
  readonly headers: Record<string, string>
}

/** The same headers for every path. */
const appendsTo = (paths: ReadonlyArray<string>, headers: Record<string, string>): ReadonlyArray<AppendRequest> =>
  paths.map((path) => ({ path, headers }))

interface DriveTarget {
  readonly port: number
  readonly serverPid: number
  /** Taken round robin: one conversation's path and the headers that authenticate an append to it. */
  readonly requests: ReadonlyArray<AppendRequest>
  /** Whether each request carries a new `x-idempotency-key`. */
  readonly idempotencyKeys: boolean
  /** Backend pids of the database (when the window opens, and again when it closes). */
  readonly pgPids: () => Promise<ReadonlyArray<number>>
  readonly onWindow: (edge: "open" | "close") => void
  /** Why the run must end early (the server exited, the bench was interrupted), or undefined. */
  readonly abort: () => string | undefined
}

/**
 * C clients, each sending one request at a time on a keep-alive socket, conversations taken round
 * robin. Counts completions inside [window open, window close]; then lets in-flight requests finish.
 */
const drive = (target: DriveTarget, clients: number, warmupMs: number, durationMs: number) =>
  new Promise<DriveResult>((resolveDrive, rejectDrive) => {
    const agent = new Agent({ keepAlive: true, maxSockets: clients, maxFreeSockets: clients })
    const requests = target.requests.map(({ path, headers }) => ({
      path,
      headers: { ...headers, "content-type": "application/json", "content-length": BODY.length }
    }))
    // Keys stay unique across the scenarios of one bench run.
    const runId = randomUUID().slice(0, 8)
    let latencies = new Float64Array(1 << 16)
    let recorded = 0
    let errors = 0
    const errorSamples: Array<string> = []
    let next = 0
    let windowStart = Number.POSITIVE_INFINITY
    let windowEnd = Number.POSITIVE_INFINITY
    let stopping = false
    let active = clients
    const backends = backendCpu(target.pgPids)
    let warmedMs = 0
    let before: CpuSnapshot | undefined
    let after: CpuSnapshot | undefined
    let pgUsed: Promise<number> | undefined

    const fail = (message: string) => {
      errors += 1
      if (errorSamples.length < 5) errorSamples.push(message)
    }

    const record = (ms: number) => {
      if (recorded === latencies.length) {
        const bigger = new Float64Array(latencies.length * 2)
        bigger.set(latencies)
        latencies = bigger
      }
      latencies[recorded++] = ms
    }

    let abortReason: string | undefined
    const timers = new Set<NodeJS.Timeout>()
    const later = (f: () => void, ms: number) => {
      const timer = setTimeout(() => {
        timers.delete(timer)
        f()
      }, ms)
      timers.add(timer)
    }

    const done = () => {
      if (!stopping) {
        abortReason = target.abort()
        if (abortReason !== undefined) stopping = true
      }
      if (stopping) {
        active -= 1
        if (active === 0) {
          agent.destroy()
          for (const timer of timers) clearTimeout(timer)
          if (abortReason !== undefined) return rejectDrive(new Error(abortReason))
          const b = before!
          const a = after!
          const server = a.server - b.server
          const generator = a.generator - b.generator
          const seconds = (windowEnd - windowStart) / 1000
          return void pgUsed!.then((pg) => resolveDrive({
            latencies: latencies.subarray(0, recorded),
            windowMs: windowEnd - windowStart,
            warmupMs: warmedMs,
            errors,
            errorSamples,
            cpu: {
              server: server / seconds,
              pg: pg / seconds,
              generator: generator / seconds,
              other: Math.max(0, a.machine - b.machine - server - pg - generator) / seconds
            }
          }), rejectDrive)
        }
        return
      }
      issue()
    }

    const issue = () => {
      const { path, headers } = requests[next++ % requests.length]!
      const started = performance.now()
      let settled = false
      const sent = target.idempotencyKeys ? { ...headers, "x-idempotency-key": `bench-${runId}-${next}` } : headers
      const req = request(
        { agent, host: "127.0.0.1", port: target.port, method: "POST", path, headers: sent },
        (res) => {
          const status = res.statusCode ?? 0
          const ok = status >= 200 && status < 300
          let errorBody = ""
          res.on("data", (chunk: Buffer) => {
            if (!ok && errorBody.length < 300) errorBody += chunk.toString("utf8")
          })
          res.on("end", () => {
            if (settled) return
            settled = true
            const finished = performance.now()
            if (!ok) fail(`${status} ${errorBody.slice(0, 300)}`)
            else if (finished >= windowStart && finished <= windowEnd) record(finished - started)
            done()
          })
        }
      )
      req.setTimeout(30_000, () => req.destroy(new Error("no answer within 30 s")))
      req.on("error", (error) => {
        if (settled) return
        settled = true
        fail(`transport: ${error.message}`)
        done()
      })
      req.end(BODY)
    }

    // The window opens once the warm-up time is over and every conversation has had a request
    // (so entity start-up and state loads stay out of it), at the latest after MAX_EXTRA_WARMUP_MS.
    const began = performance.now()
    const openWindow = () => {
      const overdue = performance.now() - began > warmupMs + MAX_EXTRA_WARMUP_MS
      if (stopping) return
      if (next < requests.length && !overdue) return later(openWindow, 50)
      void target.pgPids().then((pids) => {
        if (stopping) return
        windowStart = performance.now()
        warmedMs = windowStart - began
        before = snapshot(target.serverPid)
        backends.start(pids)
        target.onWindow("open")
        const sampleBackends = () => {
          if (stopping) return
          backends.sample()
          later(sampleBackends, BACKEND_SAMPLE_MS)
        }
        later(sampleBackends, BACKEND_SAMPLE_MS)
        later(() => {
          windowEnd = performance.now()
          after = snapshot(target.serverPid)
          pgUsed = backends.finish()
          target.onWindow("close")
          stopping = true
        }, durationMs)
      })
    }
    later(openWindow, warmupMs)

    for (let i = 0; i < clients; i++) issue()
  })

// ---------------------------------------------------------------------------------------------
// Scenarios

interface Row {
  readonly scenario: string
  readonly clients: number
  readonly conversations: number
  readonly requests: number
  readonly perSecond: number
  readonly p50: number
  readonly p99: number
  readonly errors: number
  readonly errorSamples: ReadonlyArray<string>
  readonly cpu: DriveResult["cpu"]
  readonly probe: ProbeReport | undefined
  /** The server's instructions and cycles in the window, where perf can count them. */
  readonly counters: Counters | undefined
}

/** The middle value (the mean of the two middle ones for an even count). */
const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}

const backendPids = (dbUrl: string, database: string) =>
  withDatabase(dbUrl, async (client) => {
    const result = await client.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
      [database]
    )
    return result.rows.map((r) => r.pid)
  }).catch(() => [] as Array<number>)

/** Reads the probe's line for the window just closed (it writes it asynchronously). */
const readProbe = async (child: Child, windows: number): Promise<ProbeReport | undefined> => {
  if (child.probeFile === undefined) return undefined
  for (let i = 0; i < 100; i++) {
    if (existsSync(child.probeFile)) {
      const lines = readFileSync(child.probeFile, "utf8").split("\n").filter((l) => l.length > 0)
      if (lines.length >= windows) return JSON.parse(lines[windows - 1]!) as ProbeReport
    }
    await sleep(100)
  }
  return undefined
}

const probeWindows = new Map<Child, number>()

const runScenario = async (
  scenario: string,
  child: Child,
  requests: ReadonlyArray<AppendRequest>,
  conversations: number,
  db: { readonly url: string; readonly name: string },
  options: Options
): Promise<Row> => {
  // Each run starts from a clean checkpoint, so one run's dirty pages are not the next one's cost.
  await withDatabase(db.url, (client) => client.query("CHECKPOINT")).catch(() => undefined)
  process.stdout.write(`  ${scenario}: C=${options.clients} K=${conversations}, ` +
    `${options.warmupMs / 1000} s warm-up + ${options.durationMs / 1000} s measured ... `)
  let counting: CounterRun | undefined
  let stopped: Promise<Counters | undefined> | undefined
  const result = await drive(
    {
      port: child.port,
      serverPid: child.process.pid!,
      requests,
      idempotencyKeys: options.idempotencyKeys,
      pgPids: () => backendPids(db.url, db.name),
      onWindow: (edge) => {
        if (options.probe !== undefined) child.process.kill("SIGUSR2")
        if (edge === "open" && perfCounters) counting = startCounters(child.process.pid!)
        if (edge === "close") stopped = counting?.stop()
      },
      abort: () =>
        interrupted() !== undefined
          ? `interrupted (${interrupted()})`
          : child.exited
          ? `${child.name} exited during the run:\n${tail(child.logFile)}`
          : undefined
    },
    options.clients,
    options.warmupMs,
    options.durationMs
  )
  let probe: ProbeReport | undefined
  if (options.probe !== undefined) {
    const windows = (probeWindows.get(child) ?? 0) + 1
    probeWindows.set(child, windows)
    probe = await readProbe(child, windows)
  }
  const sorted = Float64Array.from(result.latencies).sort()
  const row: Row = {
    scenario,
    clients: options.clients,
    conversations,
    requests: sorted.length,
    perSecond: sorted.length / (result.windowMs / 1000),
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    errors: result.errors,
    errorSamples: result.errorSamples,
    cpu: result.cpu,
    probe,
    counters: await stopped
  }
  console.log(`${Math.round(row.perSecond)} activities/s${row.errors > 0 ? `, ${row.errors} errors` : ""}` +
    (result.warmupMs > options.warmupMs + 1000 ? ` (warm-up took ${(result.warmupMs / 1000).toFixed(1)} s to reach every conversation)` : ""))
  return row
}

interface ParleySetup {
  readonly apiKey: string
  readonly channelSecret: string
  readonly conversationIds: ReadonlyArray<string>
  readonly singleId: string
}

/** One tenant (limit raised), one webhook channel, K + 1 conversations stored directly. */
const setUpParley = async (node: Child, run: Run, k: number): Promise<ParleySetup> => {
  const ids = Array.from({ length: k + 1 }, () => randomUUID())
  const { apiKey, channels: [channel] } = await setUpTenant(node, run, [{ name: "bench", url: "http://127.0.0.1:9/hook", conversations: ids }])
  return { apiKey, channelSecret: channel!.secret, conversationIds: ids.slice(0, k), singleId: ids[k]! }
}

const activityPath = (id: string) => `/api/v1/conversations/${id}/activities`
const clientActivityPath = (id: string) => `/api/v1/chat/conversations/${id}/activities`
/** Reconnects in flight while the client scenario's tokens are minted. */
const MINT_CONCURRENCY = 16

/**
 * The client API's requests: one channel token from the secret (`tokens/generate`), then a token bound
 * to each conversation, as a widget gets it (reconnect: `GET /api/v1/chat/conversations/:id`).
 */
const clientAppends = async (node: Child, setup: ParleySetup): Promise<ReadonlyArray<AppendRequest>> => {
  const generated = expectStatus("token generate", await call(node.port, "POST", "/api/v1/chat/tokens/generate", { authorization: `Bearer ${setup.channelSecret}` }, {
    user: { id: "bench-user" }
  }), 200)
  const channelToken = { authorization: `Bearer ${(generated as { token: string }).token}` }
  const requests: Array<AppendRequest> = []
  for (let i = 0; i < setup.conversationIds.length; i += MINT_CONCURRENCY) {
    const batch = setup.conversationIds.slice(i, i + MINT_CONCURRENCY)
    requests.push(...await Promise.all(batch.map(async (id) => {
      const reconnect = expectStatus("reconnect", await call(node.port, "GET", `/api/v1/chat/conversations/${id}`, channelToken), 200)
      return { path: clientActivityPath(id), headers: { authorization: `Bearer ${(reconnect as { token: string }).token}` } }
    })))
  }
  return requests
}

// ---------------------------------------------------------------------------------------------
// Report

const fixed = (n: number, digits: number) => (Number.isFinite(n) ? n.toFixed(digits) : "-")

const printTable = (rows: ReadonlyArray<Row>) => {
  const header = [
    "scenario", "C", "K", "requests", "activities/s", "p50 ms", "p99 ms", "errors",
    "cpu srv", "cpu pg", "cpu gen", "cpu other", "srv µs/req", "pg µs/req", "srv instr/req", "srv IPC"
  ]
  const perRequest = (cores: number, r: Row) => (r.perSecond > 0 ? String(Math.round((cores / r.perSecond) * 1e6)) : "-")
  const cells = rows.map((r) => [
    r.scenario,
    String(r.clients),
    String(r.conversations),
    String(r.requests),
    String(Math.round(r.perSecond)),
    fixed(r.p50, 1),
    fixed(r.p99, 1),
    String(r.errors),
    fixed(r.cpu.server, 2),
    fixed(r.cpu.pg, 2),
    fixed(r.cpu.generator, 2),
    fixed(r.cpu.other, 2),
    perRequest(r.cpu.server, r),
    perRequest(r.cpu.pg, r),
    r.counters === undefined || r.requests === 0 ? "-" : `${Math.round(r.counters.instructions / r.requests / 1000)}k`,
    r.counters === undefined ? "-" : fixed(r.counters.instructions / r.counters.cycles, 2)
  ])
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)))
  const line = (c: ReadonlyArray<string>) =>
    "| " + c.map((v, i) => (i === 0 ? v.padEnd(widths[i]!) : v.padStart(widths[i]!))).join(" | ") + " |"
  console.log(line(header))
  console.log("|" + widths.map((w, i) => (i === 0 ? "-".repeat(w + 2) : "-".repeat(w + 1) + ":")).join("|") + "|")
  for (const c of cells) console.log(line(c))
}

const printProbe = (row: Row) => {
  const probe = row.probe
  if (probe === undefined) return
  const seconds = probe.windowMs / 1000
  const total = Object.values(probe.queries).reduce((a, b) => a + b, 0)
  console.log(`\n${row.scenario}: event loop ${(probe.eventLoopUtilization * 100).toFixed(0)}% busy, ` +
    `GC ${(probe.gcMs / seconds).toFixed(0)} ms/s (${probe.gcCount} pauses), ` +
    `${(total / Math.max(1, row.requests)).toFixed(2)} SQL statements, ` +
    `${(probe.fibersStarted / Math.max(1, row.requests)).toFixed(1)} fibers started and ` +
    `${(probe.fiberRuns / Math.max(1, row.requests)).toFixed(1)} fiber runs per request` +
    (probe.profile === null ? "" : `, profile ${probe.profile}`))
  const ops = Object.entries(probe.effectOps)
  if (ops.length > 0) {
    const perRequest = (n: number) => (n / Math.max(1, row.requests)).toFixed(0)
    console.log(`  Effect run-loop instructions per request: ${perRequest(ops.reduce((sum, [, n]) => sum + n, 0))} (` +
      ops.slice(0, 6).map(([kind, n]) => `${kind} ${perRequest(n)}`).join(", ") + ")")
  }
  for (const [text, count] of Object.entries(probe.queries).slice(0, 12)) {
    console.log(`  ${(count / Math.max(1, row.requests)).toFixed(3).padStart(7)}/req  ${text.slice(0, 120)}`)
  }
}

// ---------------------------------------------------------------------------------------------
// Main

const main = async () => {
  const options = parseOptions(process.argv.slice(2))
  const cpus = os.cpus()
  const revocationAbort = new AbortController()
  let revocationRun: Promise<unknown> | undefined
  // A revocation run's nodes are stopped and its database dropped by its own scope.
  const run = startRun("append", options.serverUrl, async () => {
    revocationAbort.abort()
    await revocationRun?.catch(() => undefined)
  })
  const db = run.db
  console.log(perfCounters
    ? "server instructions and cycles per window from perf stat"
    : "perf stat cannot count instructions here: the instr/req and IPC columns stay empty")

  await withDatabase(options.serverUrl, async (client) => {
    const settings = await client.query<{ version: string; sync: string }>(
      "SELECT current_setting('server_version') AS version, current_setting('synchronous_commit') AS sync"
    )
    const row = settings.rows[0]
    console.log(`PostgreSQL ${row?.version ?? "?"} (synchronous_commit=${row?.sync ?? "?"}), pool size ${POOL_SIZE} on both servers`)
  })
  await run.createDatabase()
  const parleyRows: Array<Row> = []
  const baselineRows: Array<Row> = []
  let singleRow: Row | undefined
  const clientRows: Array<Row> = []
  let parleySetup: ParleySetup | undefined
  /** Minted once, on the first node: tokens are checked against the database, not the node that made them. */
  let clientRequests: ReadonlyArray<AppendRequest> | undefined

  /** A Parley node on the bench database; the first one sets up the tenant and conversations. */
  const startParley = async (name: string) => {
    console.log(`starting Parley (node ${[...parleyNodeArgs(), parleyEntry()].join(" ")}) ...`)
    const node = await startParleyNode(run, name, options.probe)
    parleySetup ??= await setUpParley(node, run, options.conversations)
    return { node, setup: parleySetup }
  }

  const startBaseline = async (name: string, first: boolean) => {
    if (first) {
      await withDatabase(db.url, (client) =>
        client.query(`CREATE TABLE bench_activities (
          id uuid PRIMARY KEY,
          conversation_id uuid NOT NULL,
          text text,
          inserted_at timestamptz NOT NULL DEFAULT now()
        )`))
    }
    const port = await freePort()
    console.log("starting the node:http + pg baseline (node's default flags) ...")
    const baseline = startChild(name, [], "test/bench/baseline-server.ts", port, {
      BASELINE_PORT: String(port),
      DATABASE_URL: db.url,
      BASELINE_POOL_SIZE: String(POOL_SIZE)
    }, run.workDir, { probe: options.probe })
    await waitUntilServing(baseline, "/")
    return baseline
  }

  try {
    // Each round runs only one server at a time, started afresh: the other one's idle work (a
    // Parley node's heartbeats and polls) stays out of the window, as with one round.
    for (let round = 1; round <= options.rounds; round++) {
      const suffix = options.rounds === 1 ? "" : ` #${round}`
      const childName = (name: string) => (round === 1 ? name : `${name}-round${round}`)
      const single = round === 1 && options.only.has("single")
      if (options.only.has("parley") || options.only.has("client") || single) {
        const { node, setup } = await startParley(childName("parley"))
        const headers = { "x-api-key": setup.apiKey }
        const tenantWindow = async () => {
          parleyRows.push(await runScenario(
            `parley${suffix}`, node, appendsTo(setup.conversationIds.map(activityPath), headers), options.conversations, db, options
          ))
        }
        const clientWindow = async () => {
          clientRequests ??= await clientAppends(node, setup)
          clientRows.push(await runScenario(`parley, client API${suffix}`, node, clientRequests, options.conversations, db, options))
        }
        // Both APIs on the same node; which goes first alternates by round, so neither always has the younger node.
        const windows = [
          ...(options.only.has("parley") ? [tenantWindow] : []),
          ...(options.only.has("client") ? [clientWindow] : [])
        ]
        for (const window of round % 2 === 1 ? windows : windows.reverse()) await window()
        if (single) {
          singleRow = await runScenario("parley, 1 conversation", node, appendsTo([activityPath(setup.singleId)], headers), 1, db, options)
        }
        await stopChild(node)
      }
      if (options.only.has("baseline")) {
        const baseline = await startBaseline(childName("baseline"), round === 1)
        const ids = Array.from({ length: options.conversations }, () => randomUUID())
        baselineRows.push(
          await runScenario(`baseline (node:http + pg)${suffix}`, baseline, appendsTo(ids.map(activityPath), {}), options.conversations, db, options)
        )
        await stopChild(baseline)
      }
    }
  } finally {
    if (interrupted() === undefined) {
      await stopChildren()
      await run.dropDatabase()
    }
  }

  // Parley's two APIs, then its floor, round by round; then the single conversation.
  const rows: Array<Row> = []
  for (let i = 0; i < options.rounds; i++) {
    rows.push(...[parleyRows[i], clientRows[i], baselineRows[i]].filter((r) => r !== undefined))
  }
  if (singleRow !== undefined) rows.push(singleRow)
  if (rows.length > 0) printAppends(rows, parleyRows, clientRows, baselineRows, cpus)
  if (options.only.has("revocation") && interrupted() === undefined) {
    console.log(`\nmeasuring revocation propagation (${options.revocations} revocations, two nodes on their own database) ...`)
    const figures = measureRevocationPropagation(options.serverUrl, options.revocations, revocationAbort.signal)
    revocationRun = figures
    console.log(formatRevocationFigures(await figures))
  }
  if (rows.some((r) => r.errors > 0)) process.exitCode = 1
}

/** The table, the ratios against the tenant API and the floor (medians over rounds), errors and probes. */
const printAppends = (
  rows: ReadonlyArray<Row>,
  parleyRows: ReadonlyArray<Row>,
  clientRows: ReadonlyArray<Row>,
  baselineRows: ReadonlyArray<Row>,
  cpus: ReadonlyArray<os.CpuInfo>
) => {
  console.log("")
  printTable(rows)
  console.log("")
  console.log(`cores: ${cpus.length} (${cpus[0]?.model ?? "unknown CPU"}); cpu columns: cores used during the window ` +
    `by the server process, its PostgreSQL backends, this load generator and everything else; µs/req: CPU time per append; ` +
    `srv instr/req and IPC: the server's instructions per append and per cycle (a busy host lowers IPC, not instructions)`)
  for (const row of rows) {
    if (row.cpu.other > 0.25) {
      console.log(`WARNING: other processes used ${row.cpu.other.toFixed(2)} cores during "${row.scenario}": ` +
        `its throughput and latency are disturbed (the µs/req columns much less so)`)
    }
  }
  // With several rounds the targets are judged on the medians: a host's speed drifts between windows.
  const of = (values: ReadonlyArray<unknown>) => (values.length === 1 ? "" : `median of ${values.length} rounds `)
  const printRatio = (label: string, rows: ReadonlyArray<Row>, against: ReadonlyArray<Row>, target: number) => {
    const ratios = rows.flatMap((row, i) => {
      const other = against[i]
      return other === undefined ? [] : [row.perSecond / other.perSecond]
    })
    if (ratios.length === 0) return
    const ratio = median(ratios)
    const each = ratios.length === 1 ? "" : ` (rounds: ${ratios.map((r) => `${r.toFixed(2)}x`).join(", ")})`
    console.log(`${label}: ${of(ratios)}${ratio.toFixed(2)}x${each} (target >= ${target.toFixed(1)}x: ${ratio >= target ? "met" : "NOT met"})`)
  }
  printRatio("Parley / baseline", parleyRows, baselineRows, 1)
  printRatio("client API / tenant API", clientRows, parleyRows, 0.9)
  if (parleyRows.length > 0) {
    const rate = median(parleyRows.map((row) => row.perSecond))
    console.log(`Parley activities/s: ${of(parleyRows)}${Math.round(rate)} (target >= 5200: ${rate >= 5200 ? "met" : "NOT met"})`)
  }
  const failed = rows.filter((r) => r.errors > 0)
  for (const row of failed) {
    console.log(`INVALID: ${row.scenario} had ${row.errors} error answers, e.g.:`)
    for (const sample of row.errorSamples) console.log(`  ${sample}`)
  }
  for (const row of rows) printProbe(row)
}

void runBench(main)
