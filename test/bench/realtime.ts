/**
 * `npm run bench:realtime` (and the second half of `npm run bench`): Parley's realtime delivery,
 * each figure beside its target and its floor. A tool, not a test (see test/bench/README.md,
 * "Realtime").
 *
 * On a fresh database (`CREATE DATABASE parley_bench_<random>`, dropped at the end) it starts Parley
 * nodes as child processes (`node <npm start's flags> dist/src/main.js`), one tenant (activity_create
 * raised), one webhook channel, conversations inserted directly, and one channel-scoped token
 * (`tokens/generate` with `{scope: "channel"}`), which may join every conversation of the channel.
 * The listeners live in P other processes (test/bench/realtime-clients.ts); the appends are posted
 * from this one through the tenant API. The floor is test/bench/ws-floor-server.ts: a bare `ws` +
 * node:http server that answers joins and broadcasts each POST to the conversation's listeners.
 *
 * 1. idle: S Phoenix-binding sockets (`/socket/chat/websocket?token=…&vsn=2.0.0`), each joined to
 *    `chat:conversation:<id>` of one of N conversations, held on one node: its RSS, and the RSS delta
 *    per socket; the same sockets on the floor.
 * 2. fanout: K conversations, each followed by one Phoenix socket and one SSE stream
 *    (`/api/v1/chat/conversations/<id>/events?token=…`); R appends per second spread over them
 *    (open loop); latency = 201 received by the poster → activity received by each listener,
 *    on one node, on two nodes (listeners on B, appends to A), and on the floor.
 * 3. throughput: T conversations each followed by L Phoenix sockets, appends posted by C closed-loop
 *    clients: activities delivered to the listeners per second, per core the node used.
 *
 * Flags (or environment variables):
 *   --only LIST           BENCH_RT_ONLY          idle,fanout,throughput (all)
 *   --servers LIST        BENCH_RT_SERVERS       parley,floor (both)
 *   --sockets S           BENCH_RT_SOCKETS       idle sockets (19500)
 *   --idle-conversations N BENCH_RT_IDLE_CONVERSATIONS conversations the idle sockets spread over (1000;
 *                         = S for one each, which a node does not hold: README, Realtime)
 *   --client-processes P  BENCH_RT_CLIENT_PROCESSES listener processes (3; each may hold 20,000 files)
 *   --conversations K     BENCH_RT_CONVERSATIONS fanout conversations (1000)
 *   --rate R              BENCH_RT_RATE          fanout appends per second (500)
 *   --tp-conversations T  BENCH_RT_TP_CONVERSATIONS throughput conversations (20)
 *   --tp-listeners L      BENCH_RT_TP_LISTENERS  sockets per throughput conversation (100)
 *   --tp-posters C        BENCH_RT_TP_POSTERS    closed-loop posters in the throughput scenario (16)
 *   --warmup S            BENCH_RT_WARMUP_S      seconds before each measured window (3)
 *   --duration S          BENCH_RT_DURATION_S    measured seconds per window (10)
 *   BENCH_RT_CPU_PROFILE=DIR a .cpuprofile of every measured fan-out and throughput window of the Parley
 *                         nodes, by the append bench's probe (test/bench/probe.ts; read them with
 *                         test/bench/profile-summary.ts)
 *   BENCH_RT_HEAP_SNAPSHOT=1 a heap snapshot of the node holding the idle sockets (see `heapSnapshot`)
 *   BENCH_RT_JOIN_CONCURRENCY=N sockets each listener process connects and joins at once (8)
 *   --token-user ID       BENCH_RT_TOKEN_USER    user.id of the listeners' channel-scoped token (bench-agent; "" for
 *                                              none: its sockets are then no viewers, no presence)
 *   DATABASE_URL          server to create the database on (postgres://postgres@127.0.0.1:5432/postgres)
 *   BENCH_SERVER_NODE_ARGS replaces Parley's node flags (e.g. "--max-semi-space-size=64 --cpu-prof --cpu-prof-dir=/tmp/prof")
 */
import { randomUUID } from "node:crypto"
import { Agent, request } from "node:http"
import os from "node:os"
import type { ClientCommand, ClientReply, ClientStats, Receipts } from "./realtime-clients.js"
import { machineBusy, monotonicMs, percentile, processCpu, processRss } from "./measure.js"
import { call, type Child, freePorts, sleep, startChild, stopChild, tail, waitUntilServing, withDatabase } from "./processes.js"
import { expectStatus, interrupted, type Run, runBench, setUpTenant, startParleyNode, startRun } from "./run.js"

// ---------------------------------------------------------------------------------------------
// Options

const SCENARIOS = ["idle", "fanout", "throughput"] as const
const SERVERS = ["parley", "floor"] as const
type Scenario = (typeof SCENARIOS)[number]
type Server = (typeof SERVERS)[number]

interface Options {
  readonly only: ReadonlySet<Scenario>
  readonly servers: ReadonlySet<Server>
  readonly sockets: number
  readonly idleConversations: number
  readonly clientProcesses: number
  readonly conversations: number
  readonly rate: number
  readonly tpConversations: number
  readonly tpListeners: number
  readonly tpPosters: number
  readonly warmupMs: number
  readonly durationMs: number
  /** The `user_id` of the listeners' token ("" for none: a socket without a user is no viewer, no presence). */
  readonly tokenUser: string
  readonly serverUrl: string
}

const listOf = <A extends string>(all: ReadonlyArray<A>, text: string, what: string): ReadonlySet<A> => {
  const items = text.split(",").map((s) => s.trim()).filter((s) => s !== "")
  for (const item of items) if (!(all as ReadonlyArray<string>).includes(item)) throw new Error(`unknown ${what} "${item}" (${all.join(", ")})`)
  return new Set(items as Array<A>)
}

const parseOptions = (argv: ReadonlyArray<string>): Options => {
  const flags = new Map<string, string>()
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!
    if (!arg.startsWith("--")) throw new Error(`unexpected argument ${arg}`)
    const value = argv[i + 1]
    if (value === undefined) throw new Error(`${arg} needs a value`)
    flags.set(arg.slice(2), value)
    i += 1
  }
  const known = ["only", "servers", "sockets", "idle-conversations", "client-processes", "conversations", "rate",
    "tp-conversations", "tp-listeners", "tp-posters", "warmup", "duration", "token-user"]
  for (const name of flags.keys()) if (!known.includes(name)) throw new Error(`unknown flag --${name} (${known.map((k) => `--${k}`).join(" ")})`)
  // Seconds are named as such in the environment (BENCH_RT_WARMUP_S), as in the append bench.
  const seconds = new Set(["warmup", "duration"])
  const env = (name: string) => process.env[`BENCH_RT_${name.toUpperCase().replaceAll("-", "_")}${seconds.has(name) ? "_S" : ""}`]
  const text = (name: string, fallback: string) => flags.get(name) ?? env(name) ?? fallback
  const number = (name: string, fallback: number) => {
    const n = Number(text(name, String(fallback)))
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a number`)
    return n
  }
  const sockets = number("sockets", 19_500)
  return {
    only: listOf(SCENARIOS, text("only", SCENARIOS.join(",")), "scenario"),
    servers: listOf(SERVERS, text("servers", SERVERS.join(",")), "server"),
    sockets,
    // One conversation per socket is not held by a node (README, Realtime): 1,000, ~20 sockets each.
    idleConversations: Math.max(1, number("idle-conversations", Math.min(sockets, 1000))),
    clientProcesses: Math.max(1, number("client-processes", 3)),
    conversations: Math.max(1, number("conversations", 1000)),
    rate: number("rate", 500),
    tpConversations: Math.max(1, number("tp-conversations", 20)),
    tpListeners: Math.max(1, number("tp-listeners", 100)),
    tpPosters: Math.max(1, number("tp-posters", 16)),
    warmupMs: number("warmup", 3) * 1000,
    durationMs: number("duration", 10) * 1000,
    tokenUser: text("token-user", "bench-agent"),
    serverUrl: process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/postgres"
  }
}

// ---------------------------------------------------------------------------------------------
// Listener processes

interface Listeners {
  readonly processes: ReadonlyArray<Child>
  /** Sends one command to process `i` and waits for its answer. */
  readonly send: (i: number, command: DistributiveOmit<ClientCommand, "id">) => Promise<ClientReply>
  /** Every process's stats, summed. */
  readonly stats: () => Promise<ClientStats>
  /** The listeners' CPU seconds so far (all processes). */
  readonly cpu: () => number
  readonly closeAll: () => Promise<void>
}

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never

const startListeners = async (count: number, workDir: string): Promise<Listeners> => {
  const processes = Array.from({ length: count }, (_, i) =>
    startChild(`listeners-${i + 1}`, ["--max-old-space-size=4096"], "test/bench/realtime-clients.ts", 0, {}, workDir, { ipc: true }))
  let nextId = 0
  const pending = new Map<number, { resolve: (reply: ClientReply) => void; reject: (error: Error) => void }>()
  for (const child of processes) {
    child.process.on("message", (reply: ClientReply) => {
      const waiter = pending.get(reply.id)
      pending.delete(reply.id)
      waiter?.resolve(reply)
    })
    child.process.once("exit", (code) => {
      for (const [id, waiter] of pending) {
        pending.delete(id)
        waiter.reject(new Error(`${child.name} exited (${code}):\n${tail(child.logFile)}`))
      }
    })
  }
  const send = (i: number, command: DistributiveOmit<ClientCommand, "id">) =>
    new Promise<ClientReply>((resolve, reject) => {
      const id = ++nextId
      pending.set(id, { resolve, reject })
      processes[i]!.process.send({ ...command, id })
    }).then((reply) => {
      if (!reply.ok) throw new Error(`${processes[i]!.name}: ${reply.error}`)
      return reply
    })
  const stats = async () => {
    const all = await Promise.all(processes.map(async (_, i) => {
      const reply = await send(i, { op: "stats" })
      return "stats" in reply ? reply.stats : undefined
    }))
    const closes: Record<string, number> = {}
    const sum: { sockets: number; streams: number; activities: number; errors: number; errorSamples: Array<string> } = {
      sockets: 0, streams: 0, activities: 0, errors: 0, errorSamples: []
    }
    for (const s of all) {
      if (s === undefined) continue
      sum.sockets += s.sockets
      sum.streams += s.streams
      sum.activities += s.activities
      sum.errors += s.errors
      sum.errorSamples.push(...s.errorSamples)
      for (const [code, n] of Object.entries(s.closes)) closes[code] = (closes[code] ?? 0) + n
    }
    return { ...sum, closes, errorSamples: sum.errorSamples.slice(0, 5) }
  }
  const cpu = () => processes.reduce((total, child) => total + (processCpu(child.process.pid!) ?? 0), 0)
  const closeAll = async () => {
    await Promise.all(processes.map((_, i) => send(i, { op: "closeAll" })))
  }
  return { processes, send, stats, cpu, closeAll }
}

/** Item j goes to process j mod P. */
const spread = <A>(items: ReadonlyArray<A>, processes: number) =>
  Array.from({ length: processes }, (_, i) => items.filter((_, j) => j % processes === i))

const openedOf = (replies: ReadonlyArray<ClientReply>) => ({
  opened: replies.reduce((n, r) => n + ("opened" in r ? r.opened ?? 0 : 0), 0),
  failed: replies.reduce((n, r) => n + ("failed" in r ? r.failed ?? 0 : 0), 0),
  untried: replies.reduce((n, r) => n + ("untried" in r ? r.untried ?? 0 : 0), 0),
  ms: Math.max(0, ...replies.map((r) => ("ms" in r ? r.ms ?? 0 : 0)))
})

// ---------------------------------------------------------------------------------------------
// Servers

/** Where the listeners connect and the appends go. */
interface Target {
  readonly name: string
  readonly child: Child
  /** Query string of every listener (`token=…` for Parley, empty for the floor). */
  readonly query: string
  /** Headers of every append. */
  readonly headers: Record<string, string>
}

const phoenixUrl = (target: Target) => `ws://127.0.0.1:${target.child.port}/socket/chat/websocket?${target.query}&vsn=2.0.0`
const ssePath = (target: Target, conversationId: string) => `/api/v1/chat/conversations/${conversationId}/events?${target.query}`
const appendPath = (conversationId: string) => `/api/v1/conversations/${conversationId}/activities`

interface Setup {
  readonly apiKey: string
  readonly token: string
}

// ---------------------------------------------------------------------------------------------
// Appends

interface Posted {
  /** Acknowledgement time (monotonic ms) of every activity posted inside the window, by id. */
  readonly acks: Map<string, number>
  /** Latencies (ms) of the appends acknowledged inside the window. */
  readonly appendLatencies: Float64Array
  readonly errors: number
  readonly errorSamples: ReadonlyArray<string>
  readonly windowMs: number
  /** Behind schedule: the open loop could not issue its appends because `MAX_OUTSTANDING` were in flight. */
  readonly skipped: number
}

const BODY = Buffer.from(JSON.stringify({ text: "hello from the realtime benchmark" }))
/** The open loop's cap on appends in flight (it counts what it could not send). */
const MAX_OUTSTANDING = 256

/**
 * Posts to `conversations` round robin: at `rate` per second (open loop), or with `posters` clients
 * one append in flight each (closed loop) when `rate` is undefined. `onWindow` is called when the
 * measured window opens and closes; acknowledgements are timed inside it.
 */
const post = (
  port: number,
  headers: Record<string, string>,
  conversations: ReadonlyArray<string>,
  load: { readonly rate: number } | { readonly posters: number },
  warmupMs: number,
  durationMs: number,
  onWindow: (edge: "open" | "close") => Promise<void>
) =>
  new Promise<Posted>((resolvePosted) => {
    const agent = new Agent({ keepAlive: true, maxSockets: "rate" in load ? MAX_OUTSTANDING : load.posters })
    const sent = { ...headers, "content-type": "application/json", "content-length": String(BODY.length) }
    const acks = new Map<string, number>()
    const latencies: Array<number> = []
    let errors = 0
    const errorSamples: Array<string> = []
    let next = 0
    let outstanding = 0
    let skipped = 0
    let windowStart = Number.POSITIVE_INFINITY
    let windowEnd = Number.POSITIVE_INFINITY
    let stopping = false
    const fail = (message: string) => {
      errors += 1
      if (errorSamples.length < 5) errorSamples.push(message)
    }
    const finish = () => {
      if (!stopping || outstanding > 0) return
      agent.destroy()
      resolvePosted({ acks, appendLatencies: Float64Array.from(latencies).sort(), errors, errorSamples, windowMs: windowEnd - windowStart, skipped })
    }
    const issue = (then: () => void) => {
      const conversationId = conversations[next++ % conversations.length]!
      const started = monotonicMs()
      outstanding += 1
      let settled = false
      const settle = () => {
        settled = true
        outstanding -= 1
        then()
        finish()
      }
      const req = request({ agent, host: "127.0.0.1", port, method: "POST", path: appendPath(conversationId), headers: sent }, (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (chunk: Buffer) => chunks.push(chunk))
        res.on("end", () => {
          if (settled) return
          const at = monotonicMs()
          const text = Buffer.concat(chunks).toString("utf8")
          if (res.statusCode !== 201) fail(`${res.statusCode} ${text.slice(0, 300)}`)
          else if (started >= windowStart && started <= windowEnd) {
            latencies.push(at - started)
            try {
              acks.set((JSON.parse(text) as { data: { id: string } }).data.id, at)
            } catch {
              fail(`unparsable answer ${text.slice(0, 100)}`)
            }
          }
          settle()
        })
      })
      req.setTimeout(30_000, () => req.destroy(new Error("no answer within 30 s")))
      req.on("error", (error) => {
        if (settled) return
        fail(`transport: ${error.message}`)
        settle()
      })
      req.end(BODY)
    }
    const began = monotonicMs()
    if ("rate" in load) {
      let issued = 0
      const tick = setInterval(() => {
        if (stopping) return clearInterval(tick)
        const due = Math.floor(((monotonicMs() - began) / 1000) * load.rate) - issued
        for (let i = 0; i < due; i++) {
          issued += 1
          if (outstanding >= MAX_OUTSTANDING) skipped += 1
          else issue(() => undefined)
        }
      }, 2)
    } else {
      const loop = () => {
        if (!stopping) issue(loop)
      }
      for (let i = 0; i < load.posters; i++) loop()
    }
    setTimeout(() => {
      void onWindow("open").then(() => {
        windowStart = monotonicMs()
        setTimeout(() => {
          windowEnd = monotonicMs()
          stopping = true
          void onWindow("close").then(finish)
        }, durationMs)
      })
    }, warmupMs)
  })

// ---------------------------------------------------------------------------------------------
// CPU accounting from /proc (Linux)

interface CpuReading {
  readonly at: number
  readonly servers: number
  readonly listeners: number
  readonly poster: number
  readonly machine: number
}

const cpuReading = (serverPids: ReadonlyArray<number>, listeners: Listeners): CpuReading => {
  const usage = process.cpuUsage()
  return {
    at: monotonicMs(),
    servers: serverPids.reduce((sum, pid) => sum + (processCpu(pid) ?? 0), 0),
    listeners: listeners.cpu(),
    poster: (usage.user + usage.system) / 1e6,
    machine: machineBusy()
  }
}

/** Cores used between two readings: the servers, the listener processes, this poster, and everything else (PostgreSQL, the kernel, other programs). */
interface Cores {
  readonly server: number
  readonly listeners: number
  readonly poster: number
  readonly other: number
}

const coresBetween = (a: CpuReading, b: CpuReading): Cores => {
  const seconds = (b.at - a.at) / 1000
  const server = b.servers - a.servers
  const listeners = b.listeners - a.listeners
  const poster = b.poster - a.poster
  return {
    server: server / seconds,
    listeners: listeners / seconds,
    poster: poster / seconds,
    other: Math.max(0, b.machine - a.machine - server - listeners - poster) / seconds
  }
}

// ---------------------------------------------------------------------------------------------
// Scenarios

interface IdleRow {
  readonly server: string
  readonly sockets: number
  readonly joined: number
  readonly failed: number
  readonly joinMs: number
  /** The server's CPU time per joined socket while they joined (connect, upgrade, join). */
  readonly cpuMsPerJoin: number
  /** Database transactions per joined socket. */
  readonly xactsPerJoin: number
  readonly rssBefore: number
  readonly rssAfter: number
  /** Cores the server used while holding the sockets (heartbeats every 30 s). */
  readonly holdCores: number
  readonly closes: Readonly<Record<string, number>>
  readonly errorSamples: ReadonlyArray<string>
}

/**
 * Sockets of one listener process connecting or joining at once. Joins cost the node CPU and
 * database round trips: 3 x 32 at once starved a node's pool so long that its shard-lock refresh
 * timed out (the node then refuses everything with 503 for a while).
 */
const JOIN_CONCURRENCY = Number(process.env["BENCH_RT_JOIN_CONCURRENCY"] ?? 8)

/** Failed joins after which a listener process tries no more (the node is falling over). */
const MAX_FAILED_JOINS = 100

/** Settling time after the last join, before the RSS is read (and the hold's CPU measured). */
const IDLE_SETTLE_MS = 5000

/**
 * With BENCH_RT_HEAP_SNAPSHOT=1 (and `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=DIR` in
 * BENCH_SERVER_NODE_ARGS): a heap snapshot of the node holding its sockets, written to DIR.
 * Waits until the node answers again (it stops while it writes).
 */
const heapSnapshot = async (child: Child) => {
  process.stdout.write("  heap snapshot ... ")
  child.process.kill("SIGUSR2")
  await sleep(1000)
  await waitUntilServing(child, "/health/ready", 600_000)
  console.log("written")
}

/** Opens or closes the probe's window in each Parley node (BENCH_RT_CPU_PROFILE). */
const signalProbes = (targets: ReadonlyArray<Target>) => {
  if (process.env["BENCH_RT_CPU_PROFILE"] === undefined) return
  for (const child of new Set(targets.filter((t) => t.name === "parley").map((t) => t.child))) child.process.kill("SIGUSR2")
}

/** Transactions committed or rolled back in the database so far (PostgreSQL's statistics, flushed within a second or so). */
const transactions = (db: Database) =>
  withDatabase(db.url, async (client) => {
    const result = await client.query<{ n: string }>(
      "SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE datname = $1",
      [db.name]
    )
    return Number(result.rows[0]?.n ?? 0)
  })

interface Database {
  readonly url: string
  readonly name: string
}

const idleScenario = async (
  target: Target,
  listeners: Listeners,
  conversations: ReadonlyArray<string>,
  sockets: number,
  db: Database | undefined
): Promise<IdleRow> => {
  const pid = target.child.process.pid!
  await sleep(2000)
  const xactsBefore = db === undefined ? 0 : await transactions(db)
  const rssBefore = processRss(pid)
  process.stdout.write(`  ${target.name}: ${sockets} sockets joining ... `)
  const ids = Array.from({ length: sockets }, (_, i) => conversations[i % conversations.length]!)
  const parts = spread(ids, listeners.processes.length)
  const joinCpu = processCpu(pid) ?? 0
  let peakRss = rssBefore
  const sampler = setInterval(() => {
    peakRss = Math.max(peakRss, processRss(pid))
  }, 250)
  const replies = await Promise.all(parts.map((part, i) =>
    listeners.send(i, { op: "phoenix", url: phoenixUrl(target), conversations: part, concurrency: JOIN_CONCURRENCY, maxFailures: MAX_FAILED_JOINS })))
    .finally(() => clearInterval(sampler))
  const { opened, failed, untried, ms } = openedOf(replies)
  const cpuMsPerJoin = (((processCpu(pid) ?? 0) - joinCpu) * 1000) / Math.max(1, opened)
  console.log(`${opened} joined in ${(ms / 1000).toFixed(1)} s${failed > 0 ? `, ${failed} failed` : ""}` +
    (untried > 0 ? ` (${untried} not tried: each listener process stops after ${MAX_FAILED_JOINS} failed joins)` : ""))
  if (target.child.exited) {
    // Out of memory, most likely: what it reached is the figure, its log says why.
    console.log(`  ${target.name} exited while its sockets joined (peak RSS ${mb(peakRss)}):\n${tail(target.child.logFile, 15)}`)
    await listeners.closeAll()
    return {
      server: target.name, sockets, joined: opened, failed, joinMs: ms, cpuMsPerJoin: Number.NaN, xactsPerJoin: Number.NaN,
      rssBefore, rssAfter: peakRss, holdCores: Number.NaN, closes: {}, errorSamples: [`exited while the sockets joined, peak RSS ${mb(peakRss)}`]
    }
  }
  const cpuBefore = processCpu(pid) ?? 0
  await sleep(IDLE_SETTLE_MS)
  const holdCores = ((processCpu(pid) ?? 0) - cpuBefore) / (IDLE_SETTLE_MS / 1000)
  const rssAfter = processRss(pid)
  if (process.env["BENCH_RT_HEAP_SNAPSHOT"] === "1" && target.name === "parley") await heapSnapshot(target.child)
  // Those of the heartbeats and the node's background jobs in the 5 s count too (a handful).
  const xactsPerJoin = db === undefined ? Number.NaN : ((await transactions(db)) - xactsBefore) / Math.max(1, opened)
  const stats = await listeners.stats()
  await listeners.closeAll()
  return {
    server: target.name, sockets, joined: opened, failed, joinMs: ms, cpuMsPerJoin, xactsPerJoin, rssBefore, rssAfter, holdCores,
    closes: stats.closes, errorSamples: stats.errorSamples
  }
}

interface FanoutRow {
  readonly server: string
  readonly appends: number
  readonly appendP50: number
  readonly appendP99: number
  readonly ws: Float64Array
  readonly sse: Float64Array
  readonly all: Float64Array
  /** Listener receipts expected (2 per append) but not received within the grace period. */
  readonly missing: number
  /** Receipts that came before the poster had its 201 (counted as 0 ms). */
  readonly early: number
  readonly cores: Cores
  readonly errors: number
  readonly skipped: number
  readonly errorSamples: ReadonlyArray<string>
  readonly closes: Readonly<Record<string, number>>
}

/** How long frames may still arrive after the window closes. */
const GRACE_MS = 1500

const fanoutScenario = async (
  name: string,
  postTo: Target,
  listenOn: Target,
  listeners: Listeners,
  conversations: ReadonlyArray<string>,
  options: Options
): Promise<FanoutRow> => {
  process.stdout.write(`  ${name}: ${conversations.length} sockets + ${conversations.length} SSE streams ... `)
  const parts = spread(conversations, listeners.processes.length)
  const opened = openedOf(await Promise.all(parts.flatMap((part, i) => [
    listeners.send(i, { op: "phoenix", url: phoenixUrl(listenOn), conversations: part, concurrency: JOIN_CONCURRENCY, maxFailures: MAX_FAILED_JOINS }),
    listeners.send(i, { op: "sse", port: listenOn.child.port, paths: part.map((id) => ssePath(listenOn, id)), concurrency: JOIN_CONCURRENCY })
  ])))
  process.stdout.write(`${opened.opened} open${opened.failed > 0 ? `, ${opened.failed} failed` : ""}; ` +
    `${options.rate} appends/s, ${options.warmupMs / 1000} s warm-up + ${options.durationMs / 1000} s ... `)
  const servers = [...new Set([postTo.child, listenOn.child])].map((c) => c.process.pid!)
  let start = cpuReading(servers, listeners)
  let cores = { server: 0, listeners: 0, poster: 0, other: 0 }
  const posted = await post(postTo.child.port, postTo.headers, conversations, { rate: options.rate }, options.warmupMs, options.durationMs, async (edge) => {
    signalProbes([postTo, listenOn])
    if (edge === "open") {
      await Promise.all(listeners.processes.map((_, i) => listeners.send(i, { op: "record", on: true })))
      start = cpuReading(servers, listeners)
    } else cores = coresBetween(start, cpuReading(servers, listeners))
  })
  await sleep(GRACE_MS)
  const collected = await Promise.all(listeners.processes.map(async (_, i) => {
    await listeners.send(i, { op: "record", on: false })
    const reply = await listeners.send(i, { op: "collect" })
    return "receipts" in reply ? reply.receipts : { ids: [], kinds: [], times: [] } satisfies Receipts
  }))
  const ws: Array<number> = []
  const sse: Array<number> = []
  let early = 0
  for (const receipts of collected) {
    for (let j = 0; j < receipts.ids.length; j++) {
      const ack = posted.acks.get(receipts.ids[j]!)
      if (ack === undefined) continue
      const latency = receipts.times[j]! - ack
      if (latency < 0) early += 1
      ;(receipts.kinds[j] === "ws" ? ws : sse).push(Math.max(0, latency))
    }
  }
  const stats = await listeners.stats()
  await listeners.closeAll()
  const sorted = (values: ReadonlyArray<number>) => Float64Array.from(values).sort()
  const row: FanoutRow = {
    server: name,
    appends: posted.acks.size,
    appendP50: percentile(posted.appendLatencies, 0.5),
    appendP99: percentile(posted.appendLatencies, 0.99),
    ws: sorted(ws),
    sse: sorted(sse),
    all: sorted([...ws, ...sse]),
    missing: posted.acks.size * 2 - ws.length - sse.length,
    early,
    cores,
    errors: posted.errors + stats.errors + opened.failed,
    skipped: posted.skipped,
    errorSamples: [...posted.errorSamples, ...stats.errorSamples].slice(0, 5),
    closes: stats.closes
  }
  console.log(`p99 ${ms(percentile(row.all, 0.99))}`)
  return row
}

interface ThroughputRow {
  readonly server: string
  readonly sockets: number
  readonly appendsPerSecond: number
  readonly activitiesPerSecond: number
  readonly cores: Cores
  readonly errors: number
  readonly errorSamples: ReadonlyArray<string>
  readonly closes: Readonly<Record<string, number>>
}

const throughputScenario = async (target: Target, listeners: Listeners, conversations: ReadonlyArray<string>, options: Options): Promise<ThroughputRow> => {
  const ids = conversations.flatMap((id) => Array.from({ length: options.tpListeners }, () => id))
  process.stdout.write(`  ${target.name}: ${conversations.length} conversations x ${options.tpListeners} sockets ... `)
  const opened = openedOf(await Promise.all(spread(ids, listeners.processes.length).map((part, i) =>
    listeners.send(i, { op: "phoenix", url: phoenixUrl(target), conversations: part, concurrency: JOIN_CONCURRENCY, maxFailures: MAX_FAILED_JOINS }))))
  process.stdout.write(`${opened.opened} joined; ${options.tpPosters} posters, ${options.warmupMs / 1000} s warm-up + ${options.durationMs / 1000} s ... `)
  const pids = [target.child.process.pid!]
  let start = { cpu: cpuReading(pids, listeners), activities: 0 }
  let window = { activities: 0, seconds: 1, cores: { server: 0, listeners: 0, poster: 0, other: 0 } as Cores }
  const posted = await post(target.child.port, target.headers, conversations, { posters: options.tpPosters }, options.warmupMs, options.durationMs, async (edge) => {
    const stats = await listeners.stats()
    const cpu = cpuReading(pids, listeners)
    signalProbes([target])
    if (edge === "open") start = { cpu, activities: stats.activities }
    else window = { activities: stats.activities - start.activities, seconds: (cpu.at - start.cpu.at) / 1000, cores: coresBetween(start.cpu, cpu) }
  })
  const stats = await listeners.stats()
  await listeners.closeAll()
  const result: ThroughputRow = {
    server: target.name,
    sockets: opened.opened,
    appendsPerSecond: posted.appendLatencies.length / (posted.windowMs / 1000),
    activitiesPerSecond: window.activities / window.seconds,
    cores: window.cores,
    errors: posted.errors + stats.errors + opened.failed,
    errorSamples: [...posted.errorSamples, ...stats.errorSamples].slice(0, 5),
    closes: stats.closes
  }
  console.log(`${Math.round(result.activitiesPerSecond)} activities/s delivered`)
  return result
}

// ---------------------------------------------------------------------------------------------
// Report

const ms = (n: number) => (Number.isFinite(n) ? `${n.toFixed(1)} ms` : "-")
const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MB`
const kbPerSocket = (row: IdleRow) => (row.rssAfter - row.rssBefore) / 1024 / Math.max(1, row.joined)
const group = (n: number) => Math.round(n).toLocaleString("en-US")
const closesText = (closes: Readonly<Record<string, number>>) =>
  Object.keys(closes).length === 0 ? "-" : Object.entries(closes).map(([code, n]) => `${code}:${n}`).join(" ")

const printTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((c) => c[i]!.length)))
  const line = (c: ReadonlyArray<string>) => "| " + c.map((v, i) => (i === 0 ? v.padEnd(widths[i]!) : v.padStart(widths[i]!))).join(" | ") + " |"
  console.log(line(header))
  console.log("|" + widths.map((w, i) => (i === 0 ? "-".repeat(w + 2) : "-".repeat(w + 1) + ":")).join("|") + "|")
  for (const row of rows) console.log(line(row))
}

const coresText = (c: Cores) => [c.server, c.listeners, c.poster, c.other].map((n) => n.toFixed(2)).join(" / ")

/** Other programs on the machine (PostgreSQL counts there too) disturb the figures. */
const warnBusy = (name: string, cores: Cores) => {
  if (cores.other > 0.5) console.log(`WARNING: ${name}: ${cores.other.toFixed(2)} cores used by other processes (PostgreSQL included): the machine was busy`)
}

const verdict = (ok: boolean) => (ok ? "met" : "NOT met")

const printIdle = (rows: ReadonlyArray<IdleRow>, conversations: number, processes: number) => {
  if (rows.length === 0) return
  console.log(`\n1. Idle sockets: joined Phoenix-binding sockets on one node, ${conversations === rows[0]?.sockets ? "one conversation per socket" : `${group(conversations)} conversations`}, clients in ${processes} processes`)
  printTable(
    ["server", "sockets joined", "failed", "join time", "server CPU/join", "db xacts/join", "RSS before", "RSS after", "KB/socket", "cores while held", "closes"],
    rows.map((r) => [r.server, group(r.joined), String(r.failed), `${(r.joinMs / 1000).toFixed(1)} s`, `${r.cpuMsPerJoin.toFixed(2)} ms`, Number.isNaN(r.xactsPerJoin) ? "-" : r.xactsPerJoin.toFixed(2), mb(r.rssBefore), mb(r.rssAfter),
      kbPerSocket(r).toFixed(1), r.holdCores.toFixed(2), closesText(r.closes)])
  )
  const parley = rows.find((r) => r.server === "parley")
  const floor = rows.find((r) => r.server !== "parley")
  if (parley !== undefined) {
    console.log(`Parley node RSS with ${group(parley.joined)} sockets: ${mb(parley.rssAfter)} (target <= 1 GB: ${verdict(parley.rssAfter <= 1024 ** 3 && parley.failed === 0)}); ` +
      `${kbPerSocket(parley).toFixed(1)} KB/socket (floor ${floor === undefined ? "not run" : `${kbPerSocket(floor).toFixed(1)} KB`}, about 7 KB expected; anchor Centrifugo ~30 KB)`)
  }
  for (const r of rows) for (const sample of r.errorSamples) console.log(`  ${r.server}: ${sample}`)
}

const printFanout = (rows: ReadonlyArray<FanoutRow>, options: Options) => {
  if (rows.length === 0) return
  console.log(`\n2. Fan-out latency: ${group(options.conversations)} conversations, each with one Phoenix socket and one SSE stream; ` +
    `${options.rate} appends/s (tenant API); 201 received -> activity received by each listener`)
  printTable(
    ["run", "appends", "append p50/p99", "socket p50/p99", "SSE p50/p99", "all p50/p99", "missing", "before 201", "cores srv/lst/post/other", "closes"],
    rows.map((r) => [r.server, group(r.appends), `${ms(r.appendP50)} / ${ms(r.appendP99)}`,
      `${ms(percentile(r.ws, 0.5))} / ${ms(percentile(r.ws, 0.99))}`, `${ms(percentile(r.sse, 0.5))} / ${ms(percentile(r.sse, 0.99))}`,
      `${ms(percentile(r.all, 0.5))} / ${ms(percentile(r.all, 0.99))}`, String(r.missing), String(r.early),
      coresText(r.cores), closesText(r.closes)])
  )
  const p99 = (name: string) => {
    const row = rows.find((r) => r.server === name)
    return row === undefined ? undefined : percentile(row.all, 0.99)
  }
  const one = p99("parley, 1 node")
  const two = p99("parley, 2 nodes")
  const floor = p99("floor")
  if (one !== undefined) console.log(`p99 one node: ${ms(one)} (target <= 10 ms: ${verdict(one <= 10)})`)
  if (two !== undefined) console.log(`p99 listeners on a second node: ${ms(two)} (target <= 25 ms: ${verdict(two <= 25)})`)
  if (floor !== undefined) {
    console.log(`floor p99: ${ms(floor)}` + (one === undefined ? "" : `; Parley/floor p99: ${(one / Math.max(floor, 0.1)).toFixed(1)}x`))
  }
  for (const r of rows) {
    warnBusy(r.server, r.cores)
    if (r.skipped > 0) console.log(`WARNING: ${r.server}: ${r.skipped} appends not sent (${MAX_OUTSTANDING} in flight): the server fell behind the rate`)
    for (const sample of r.errorSamples) console.log(`  ${r.server}: ${sample}`)
  }
}

const printThroughput = (rows: ReadonlyArray<ThroughputRow>, options: Options, cores: number) => {
  if (rows.length === 0) return
  console.log(`\n3. Throughput: ${options.tpConversations} conversations x ${options.tpListeners} Phoenix sockets, ` +
    `${options.tpPosters} closed-loop posters; activities received by the listeners per second, per core the server used (${cores} cores in all)`)
  printTable(
    ["server", "sockets", "appends/s", "activities/s delivered", "per server core", "cores srv/lst/post/other", "closes"],
    rows.map((r) => [r.server, group(r.sockets), group(r.appendsPerSecond), group(r.activitiesPerSecond),
      group(r.activitiesPerSecond / Math.max(r.cores.server, 0.01)), coresText(r.cores), closesText(r.closes)])
  )
  for (const r of rows) {
    warnBusy(r.server, r.cores)
    for (const sample of r.errorSamples) console.log(`  ${r.server}: ${sample}`)
  }
}

// ---------------------------------------------------------------------------------------------
// Main

const main = async () => {
  const options = parseOptions(process.argv.slice(2))
  const cpus = os.cpus()
  const run = startRun("realtime", options.serverUrl)

  const parleyWanted = options.servers.has("parley")
  const floorWanted = options.servers.has("floor")

  // The conversations of each scenario (and of each fan-out run: joins replay nothing older).
  const ids = (n: number) => Array.from({ length: n }, () => randomUUID())
  const idleIds = ids(options.only.has("idle") ? options.idleConversations : 0)
  const fanoutIds = { one: ids(options.conversations), two: ids(options.conversations) }
  const throughputIds = ids(options.tpConversations)

  let setup: Setup | undefined
  const startParley = (name: string) => retryTakenPort(() => startParleyOnce(name))
  const profileDir = process.env["BENCH_RT_CPU_PROFILE"]
  const startParleyOnce = async (name: string) => {
    // The append bench's probe (test/bench/probe.ts): a .cpuprofile of each measured window, opened and closed by SIGUSR2.
    const child = await startParleyNode(run, name, profileDir === undefined ? undefined : { cpuProfileDir: profileDir })
    setup ??= await setUpParley(child, run, [...idleIds, ...fanoutIds.one, ...fanoutIds.two, ...throughputIds], options.tokenUser)
    const target: Target = { name: "parley", child, query: `token=${encodeURIComponent(setup.token)}`, headers: { "x-api-key": setup.apiKey } }
    return target
  }
  const startFloor = () => retryTakenPort(startFloorOnce)
  const startFloorOnce = async () => {
    const [port] = await freePorts(1)
    const child = startChild("floor", [], "test/bench/ws-floor-server.ts", port!, { FLOOR_PORT: String(port) }, run.workDir)
    await waitUntilServing(child, "/")
    const target: Target = { name: "floor", child, query: "", headers: {} }
    return target
  }

  if (parleyWanted) await run.createDatabase()
  const listeners = await startListeners(options.clientProcesses, run.workDir)
  const idleRows: Array<IdleRow> = []
  const fanoutRows: Array<FanoutRow> = []
  const throughputRows: Array<ThroughputRow> = []
  try {
    if (options.only.has("idle")) {
      console.log(`idle sockets (${group(options.sockets)}, ${options.clientProcesses} listener processes):`)
      if (floorWanted) {
        const floor = await startFloor()
        idleRows.push(await idleScenario(floor, listeners, idleIds.length > 0 ? idleIds : ids(options.idleConversations), options.sockets, undefined))
        await stopChild(floor.child)
      }
      if (parleyWanted) {
        const node = await startParley("parley-idle")
        idleRows.push(await idleScenario(node, listeners, idleIds, options.sockets, run.db))
        await stopChild(node.child)
      }
      // Each scenario's table as soon as it is measured: a later scenario can take long, or fail.
      printIdle(idleRows, options.idleConversations, options.clientProcesses)
    }
    if (options.only.has("fanout") || options.only.has("throughput")) {
      const floor = floorWanted ? await startFloor() : undefined
      const parley = parleyWanted ? await startParley("parley-a") : undefined
      if (options.only.has("fanout")) {
        console.log("fan-out latency:")
        if (floor !== undefined) fanoutRows.push(await fanoutScenario("floor", floor, floor, listeners, fanoutIds.one, options))
        if (parley !== undefined) {
          fanoutRows.push(await fanoutScenario("parley, 1 node", parley, parley, listeners, fanoutIds.one, options))
          const b = await startParley("parley-b")
          await shardsSettled([parley.child, b.child])
          fanoutRows.push(await fanoutScenario("parley, 2 nodes", parley, b, listeners, fanoutIds.two, options))
          await stopChild(b.child)
        }
        printFanout(fanoutRows, options)
      }
      if (options.only.has("throughput")) {
        console.log("throughput:")
        if (floor !== undefined) throughputRows.push(await throughputScenario(floor, listeners, throughputIds, options))
        if (parley !== undefined) throughputRows.push(await throughputScenario(parley, listeners, throughputIds, options))
        printThroughput(throughputRows, options, cpus.length)
      }
      if (floor !== undefined) await stopChild(floor.child)
      if (parley !== undefined) await stopChild(parley.child)
    }
  } finally {
    if (interrupted() === undefined) {
      await Promise.all(listeners.processes.map((child) => stopChild(child, 3000)))
      await run.dropDatabase()
    }
  }
  const invalid = [...idleRows.map((r) => r.failed), ...fanoutRows.map((r) => r.errors), ...throughputRows.map((r) => r.errors)].some((n) => n > 0)
  if (invalid) {
    console.log("INVALID: some joins, streams or appends failed (samples above)")
    process.exitCode = 1
  }
}

/** The cluster's shards (`parley_cluster_shards_owned`, src/ops/NodeMetrics.ts). */
const SHARDS = 300

/**
 * Waits until the nodes own every shard between them, each some, unchanged for 3 s: a node that
 * joins takes shards over from the others, and appends to a moving shard wait for its new owner.
 */
const shardsSettled = async (nodes: ReadonlyArray<Child>) => {
  process.stdout.write("  waiting for the shards to settle between the nodes ... ")
  const owned = async () =>
    Promise.all(nodes.map(async (node) => {
      const reply = await call(node.port, "GET", "/metrics", {})
      const match = /^parley_cluster_shards_owned (\d+)/m.exec(String(reply.body))
      return match === null ? 0 : Number(match[1])
    }))
  const began = monotonicMs()
  let last = ""
  let stableSince = monotonicMs()
  while (monotonicMs() - began < 120_000) {
    const counts = await owned()
    const text = counts.join("/")
    if (text !== last) {
      last = text
      stableSince = monotonicMs()
    }
    if (counts.reduce((a, b) => a + b, 0) === SHARDS && counts.every((n) => n > 0) && monotonicMs() - stableSince >= 3000) {
      console.log(`${text} after ${((monotonicMs() - began) / 1000).toFixed(1)} s`)
      return
    }
    await sleep(500)
  }
  console.log(`not settled after 120 s (${last}): measuring anyway`)
}

/**
 * A port free when picked can be taken before the server binds it (by an outgoing connection of this
 * machine, which holds tens of thousands here): the server then exits at once, and another pick is as good.
 */
const retryTakenPort = async <A>(start: () => Promise<A>): Promise<A> => {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start()
    } catch (error) {
      if (attempt >= 3 || !String(error).includes("EADDRINUSE")) throw error
    }
  }
}

/** One tenant (limit raised), one webhook channel, the conversations stored directly, one channel-scoped token. */
const setUpParley = async (node: Child, run: Run, conversationIds: ReadonlyArray<string>, user: string): Promise<Setup> => {
  const { apiKey, channels: [channel] } = await setUpTenant(node, run, [{ name: "bench", url: "http://127.0.0.1:9/hook", conversations: conversationIds }])
  const generated = expectStatus("token generate", await call(node.port, "POST", "/api/v1/chat/tokens/generate", { authorization: `Bearer ${channel!.secret}` }, {
    ...(user === "" ? {} : { user: { id: user } }),
    scope: "channel"
  }), 200)
  return { apiKey, token: (generated as { token: string }).token }
}

void runBench(main)
