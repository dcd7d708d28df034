/**
 * `npm run bench:delivery` (and the last part of `npm run bench`): signed webhook deliveries to a local
 * receiver (issue 29). A tool, not a test (see test/bench/README.md, "Delivery").
 *
 * On a fresh database (`CREATE DATABASE parley_bench_<random>`, dropped at the end) it starts one
 * Parley node (`node <npm start's flags> dist/src/main.js`, `WEBHOOK_ALLOWED_HOSTS=127.0.0.1`, the
 * delivery settings at their defaults) and the receiver (test/bench/webhook-receiver.ts, a process of
 * its own: 200 at once, the first receive time of each delivery id, one signature in 50 checked).
 * One tenant (activity_create raised), 2N webhook channels (no `rate_limit`) pointing at the receiver,
 * M conversations each, inserted directly. Every channel paused, K activities are appended through
 * the tenant API to the conversations of the N `parley` channels and K to those of the N `floor`
 * channels: a backlog of K delivery rows on each side.
 *
 * 1. floor: Parley stopped, a bare loop in this process works the `floor` channels' backlog: per
 *    channel, claim `DELIVERY_BATCH_SIZE` due rows (the loop's `UPDATE … RETURNING` with
 *    `FOR UPDATE SKIP LOCKED`), sign and POST them `DELIVERY_CONCURRENCY` at once with an undici
 *    `Agent` set up as WebhookSender's (connect timeout, lookup pinned to 127.0.0.1), mark the batch's
 *    answered ones sent with one `UPDATE`; a `pg` pool of 10, as Parley's.
 * 2. saturation: Parley started again, its channels resumed (a resume wakes the channel's loop); it
 *    works the backlog through its channel entities.
 *    Both: deliveries/s from the first to the last receipt of the backlog's delivery ids, and every id
 *    checked to have arrived (at least once).
 * 3. latency: R appends per second (open loop) for D seconds after a W-second warm-up, round robin over
 *    the `parley` channels' conversations; p50/p99 of (receiver's receipt − append request start),
 *    both on CLOCK_MONOTONIC.
 *
 * Flags (or environment variables):
 *   --only LIST            BENCH_DL_ONLY            saturation,latency (both; saturation includes the floor)
 *   --channels N           BENCH_DL_CHANNELS        webhook channels on each side (8)
 *   --backlog K            BENCH_DL_BACKLOG         activities appended to each side's channels (20000)
 *   --conversations M      BENCH_DL_CONVERSATIONS   conversations per channel (25)
 *   --clients C            BENCH_DL_CLIENTS         concurrent appends while the backlog is built (32)
 *   --rate R               BENCH_DL_RATE            appends per second in the latency scenario (500)
 *   --warmup W             BENCH_DL_WARMUP_S        seconds of appends before the latency window (3)
 *   --duration D           BENCH_DL_DURATION_S      measured seconds of the latency scenario (20)
 *   BENCH_DL_CPU_PROFILE=DIR a .cpuprofile of Parley's saturation window and of its latency window, by the
 *                          append bench's probe (test/bench/probe.ts; read with test/bench/profile-summary.ts)
 *   DATABASE_URL           server to create the database on (postgres://postgres@127.0.0.1:5432/postgres)
 *   BENCH_SERVER_NODE_ARGS / BENCH_SERVER_ENTRY as for the other benches
 */
import { randomUUID } from "node:crypto"
import { Agent as HttpAgent, request as httpRequest } from "node:http"
import Pg from "pg"
import { Agent, request } from "undici"
import { pinnedLookup } from "../../src/delivery/WebhookSender.js"
import { signatureHeader } from "../../src/delivery/WebhookSignature.js"
import { machineBusy, monotonicMs, percentile, processCpu } from "./measure.js"
import { call, type Child, freePorts, sleep, startChild, stopChild, tail, waitUntilServing, withDatabase } from "./processes.js"
import { expectStatus, interrupted, type Run, runBench, setUpTenant, startParleyNode, startRun } from "./run.js"
import type { ReceiverCommand, ReceiverReport } from "./webhook-receiver.js"

// ---------------------------------------------------------------------------------------------
// Options

const SCENARIOS = ["saturation", "latency"] as const
type Scenario = (typeof SCENARIOS)[number]

interface Options {
  readonly only: ReadonlySet<Scenario>
  readonly channels: number
  readonly backlog: number
  readonly conversations: number
  readonly clients: number
  readonly rate: number
  readonly warmupMs: number
  readonly durationMs: number
  readonly serverUrl: string
}

const parseOptions = (argv: ReadonlyArray<string>): Options => {
  const flags = new Map<string, string>()
  for (let i = 0; i < argv.length; i += 2) {
    const arg = argv[i]!
    const value = argv[i + 1]
    if (!arg.startsWith("--") || value === undefined) throw new Error(`expected --flag value, got ${arg}`)
    flags.set(arg.slice(2), value)
  }
  const known = ["only", "channels", "backlog", "conversations", "clients", "rate", "warmup", "duration"]
  for (const name of flags.keys()) if (!known.includes(name)) throw new Error(`unknown flag --${name} (${known.map((k) => `--${k}`).join(" ")})`)
  const seconds = new Set(["warmup", "duration"])
  const text = (name: string, fallback: string) =>
    flags.get(name) ?? process.env[`BENCH_DL_${name.toUpperCase()}${seconds.has(name) ? "_S" : ""}`] ?? fallback
  const number = (name: string, fallback: number) => {
    const n = Number(text(name, String(fallback)))
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a number`)
    return n
  }
  const only = text("only", SCENARIOS.join(",")).split(",").map((s) => s.trim()).filter((s) => s !== "")
  for (const name of only) if (!(SCENARIOS as ReadonlyArray<string>).includes(name)) throw new Error(`unknown scenario "${name}" (${SCENARIOS.join(", ")})`)
  return {
    only: new Set(only as Array<Scenario>),
    channels: Math.max(1, number("channels", 8)),
    backlog: Math.max(1, number("backlog", 20_000)),
    conversations: Math.max(1, number("conversations", 25)),
    clients: Math.max(1, number("clients", 32)),
    rate: Math.max(1, number("rate", 500)),
    warmupMs: number("warmup", 3) * 1000,
    durationMs: Math.max(1, number("duration", 20)) * 1000,
    serverUrl: process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/postgres"
  }
}

// DeliverySettings' defaults (DELIVERY_BATCH_SIZE, DELIVERY_CONCURRENCY): the floor works as Parley's loop does.
const BATCH_SIZE = 50
const CONCURRENCY = 8
/** Parley's pool size (docs/configuration.md, DATABASE_URL): the floor's pool. */
const POOL_SIZE = 10
/** WebhookSender's default connect timeout and the retry policy's default `timeout_ms`. */
const CONNECT_TIMEOUT_MS = 5_000
const RECEIVE_TIMEOUT_MS = 10_000

// ---------------------------------------------------------------------------------------------
// The receiver

interface Receiver {
  readonly child: Child
  readonly send: (command: ReceiverCommand) => Promise<ReceiverReport | undefined>
}

const startReceiver = async (workDir: string): Promise<Receiver> => {
  const [port] = await freePorts(1)
  const child = startChild("receiver", [], "test/bench/webhook-receiver.ts", port!, { RECEIVER_PORT: String(port) }, workDir, { ipc: true })
  let nextId = 0
  const pending = new Map<number, (report: ReceiverReport | undefined) => void>()
  child.process.on("message", (reply: { id: number; report?: ReceiverReport }) => {
    pending.get(reply.id)?.(reply.report)
    pending.delete(reply.id)
  })
  const send = (command: ReceiverCommand) =>
    new Promise<ReceiverReport | undefined>((resolve, reject) => {
      if (child.exited) return reject(new Error(`the receiver exited:\n${tail(child.logFile)}`))
      const id = ++nextId
      pending.set(id, resolve)
      child.process.send({ ...command, id })
    })
  await waitUntilServing(child, "/")
  return { child, send }
}

const take = async (receiver: Receiver) => (await receiver.send({ op: "take" }))!

// ---------------------------------------------------------------------------------------------
// Parley

interface BenchChannel {
  readonly id: string
  readonly name: string
  readonly url: string
  readonly secret: string
  readonly conversations: ReadonlyArray<string>
}

interface Setup {
  readonly apiKey: string
  readonly parley: ReadonlyArray<BenchChannel>
  readonly floor: ReadonlyArray<BenchChannel>
}

const PROFILE_DIR = process.env["BENCH_DL_CPU_PROFILE"]

/** A Parley node; with BENCH_DL_CPU_PROFILE, the append bench's probe (a .cpuprofile of each window). */
const startNode = (run: Run, name: string) => startParleyNode(run, name, PROFILE_DIR === undefined ? undefined : { cpuProfileDir: PROFILE_DIR })

/** Opens or closes the probe's window (BENCH_DL_CPU_PROFILE). */
const signalProbe = (child: Child) => {
  if (PROFILE_DIR !== undefined) child.process.kill("SIGUSR2")
}

/** One tenant (limit raised), 2N webhook channels at the receiver with M conversations each (inserted directly), all paused. */
const setUp = async (node: Child, run: Run, receiverPort: number, options: Options): Promise<Setup> => {
  const side = (name: string) =>
    Array.from({ length: options.channels }, (_, i) => ({
      side: name,
      name: `${name}-${i + 1}`,
      url: `http://127.0.0.1:${receiverPort}/hook/${name}-${i + 1}`,
      conversations: Array.from({ length: options.conversations }, () => randomUUID())
    }))
  const { apiKey, channels } = await setUpTenant(node, run, [...side("parley"), ...side("floor")])
  for (const { id, name, rate_limit } of channels) {
    if (rate_limit !== null) throw new Error(`channel ${name} has a rate_limit: ${JSON.stringify(rate_limit)}`)
    expectStatus("channel pause", await call(node.port, "POST", `/api/v1/channels/${id}/pause`, { "x-api-key": apiKey }), 200)
  }
  return { apiKey, parley: channels.filter((c) => c.side === "parley"), floor: channels.filter((c) => c.side === "floor") }
}

// ---------------------------------------------------------------------------------------------
// Appends

const BODY = Buffer.from(JSON.stringify({ text: "hello from the delivery benchmark" }))
const appendPath = (conversationId: string) => `/api/v1/conversations/${conversationId}/activities`

/** One append through the tenant API: the new activity's id, or why not. */
const append = (agent: HttpAgent, port: number, apiKey: string, conversationId: string) =>
  new Promise<{ readonly id: string } | { readonly error: string }>((resolve) => {
    const req = httpRequest({
      agent,
      host: "127.0.0.1",
      port,
      method: "POST",
      path: appendPath(conversationId),
      headers: { "x-api-key": apiKey, "content-type": "application/json", "content-length": String(BODY.length) }
    }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (chunk: Buffer) => chunks.push(chunk))
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8")
        if (res.statusCode !== 201) return resolve({ error: `${res.statusCode} ${text.slice(0, 300)}` })
        try {
          resolve({ id: (JSON.parse(text) as { data: { id: string } }).data.id })
        } catch {
          resolve({ error: `unparsable answer ${text.slice(0, 100)}` })
        }
      })
    })
    req.setTimeout(30_000, () => req.destroy(new Error("no answer within 30 s")))
    req.on("error", (error) => resolve({ error: `transport: ${error.message}` }))
    req.end(BODY)
  })

/** `count` appends round robin over `conversations`, `clients` at a time; the errors (samples) if any. */
const appendMany = async (port: number, apiKey: string, conversations: ReadonlyArray<string>, count: number, clients: number) => {
  const agent = new HttpAgent({ keepAlive: true, maxSockets: clients })
  const errors: Array<string> = []
  let next = 0
  await Promise.all(Array.from({ length: clients }, async () => {
    while (next < count) {
      const answer = await append(agent, port, apiKey, conversations[next++ % conversations.length]!)
      if ("error" in answer) errors.push(answer.error)
    }
  }))
  agent.destroy()
  return errors
}

// ---------------------------------------------------------------------------------------------
// CPU accounting from /proc (Linux)

interface CpuReading {
  readonly at: number
  readonly server: number
  readonly receiver: number
  readonly bench: number
  readonly machine: number
}

/** Readings every 250 ms, so that the window's can be picked afterwards at its first and last receipt. */
const cpuSampler = (serverPid: () => number | undefined, receiverPid: number) => {
  const readings: Array<CpuReading> = []
  const read = () => {
    const usage = process.cpuUsage()
    const pid = serverPid()
    readings.push({
      at: monotonicMs(),
      server: pid === undefined ? 0 : processCpu(pid) ?? 0,
      receiver: processCpu(receiverPid) ?? 0,
      bench: (usage.user + usage.system) / 1e6,
      machine: machineBusy()
    })
  }
  read()
  const timer = setInterval(read, 250)
  return {
    stop: () => {
      clearInterval(timer)
      read()
    },
    /** Cores used between the readings nearest to `from` and `to`. */
    cores: (from: number, to: number) => {
      const nearest = (t: number) => readings.reduce((best, r) => (Math.abs(r.at - t) < Math.abs(best.at - t) ? r : best))
      const a = nearest(from)
      const b = nearest(to)
      const seconds = Math.max(0.001, (b.at - a.at) / 1000)
      const server = b.server - a.server
      const receiver = b.receiver - a.receiver
      const bench = b.bench - a.bench
      return {
        seconds,
        server: server / seconds,
        receiver: receiver / seconds,
        bench: bench / seconds,
        other: Math.max(0, b.machine - a.machine - server - receiver - bench) / seconds
      }
    }
  }
}

type Cores = ReturnType<ReturnType<typeof cpuSampler>["cores"]>

// ---------------------------------------------------------------------------------------------
// Saturation: Parley and the floor on a backlog each

interface SaturationRow {
  readonly name: string
  readonly expected: number
  readonly received: number
  readonly missing: number
  readonly duplicates: number
  /** Deliveries per second from the first receipt to the last. */
  readonly rate: number
  readonly spanMs: number
  /** Cores in the span: the sender (Parley's process, or this one for the floor), the receiver, the rest (PostgreSQL, the kernel, others). */
  readonly senderCores: number
  readonly cores: Cores
  readonly signaturesChecked: number
  readonly signatureFailures: ReadonlyArray<string>
  readonly signaturesFailed: number
  readonly notSent: number
}

const deliveryIdsOf = (dbUrl: string, channels: ReadonlyArray<BenchChannel>) =>
  withDatabase(dbUrl, async (client) =>
    (await client.query<{ id: string }>("SELECT id FROM deliveries WHERE channel_id = ANY($1::uuid[])", [channels.map((c) => c.id)])).rows.map((r) => r.id))

/** Deliveries still pending among those matching `where` (`$1` is `ids`). */
const pendingOf = (pool: Pg.Pool, where: string, ids: ReadonlyArray<string>) => () =>
  pool.query<{ n: string }>(`SELECT count(*) AS n FROM deliveries WHERE status = 'pending' AND ${where}`, [ids])
    .then((r) => Number(r.rows[0]?.n ?? 0))

/** What the receiver got of `expected`, the rate from its first receipt of them to its last. */
const saturationRow = (
  name: string,
  expected: ReadonlyArray<string>,
  report: ReceiverReport,
  sampler: ReturnType<typeof cpuSampler>,
  sender: "server" | "bench",
  notSent: number
): SaturationRow => {
  const times = new Map<string, number>()
  report.ids.forEach((id, i) => times.set(id, report.times[i]!))
  let first = Number.POSITIVE_INFINITY
  let last = Number.NEGATIVE_INFINITY
  let received = 0
  for (const id of expected) {
    const at = times.get(id)
    if (at === undefined) continue
    received += 1
    first = Math.min(first, at)
    last = Math.max(last, at)
  }
  const spanMs = last - first
  const cores = sampler.cores(first, last)
  return {
    name,
    expected: expected.length,
    received,
    missing: expected.length - received,
    duplicates: report.duplicates,
    rate: received > 1 ? ((received - 1) * 1000) / spanMs : Number.NaN,
    spanMs,
    senderCores: cores[sender],
    cores,
    signaturesChecked: report.signaturesChecked,
    signatureFailures: report.signatureFailures,
    signaturesFailed: report.signaturesFailed,
    notSent
  }
}

/** Claims as DeliveryLoop's `claim` does (oldest due first, skipping locked rows, the lease pushed forward). */
const CLAIM = `
  WITH due AS (
    SELECT id FROM deliveries
    WHERE channel_id = $1 AND status = 'pending' AND (next_attempt_at IS NULL OR next_attempt_at <= now())
    ORDER BY next_attempt_at NULLS FIRST, inserted_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
  )
  UPDATE deliveries d SET next_attempt_at = now() + make_interval(secs => $3), updated_at = now()
  FROM due WHERE d.id = due.id
  RETURNING d.id, d.payload`

/** The outcome DeliveryLoop records for a 2xx, for a batch's answered rows at once (as the loop does). */
const MARK_SENT = `
  UPDATE deliveries SET status = 'sent', sent_at = now(), attempts = attempts + 1, last_error = NULL,
    next_attempt_at = NULL, updated_at = now()
  WHERE id = ANY($1::uuid[]) AND status = 'pending'`

/**
 * The floor: per channel, claim a batch, POST it `CONCURRENCY` at once (each signed, through an undici
 * Agent set up as WebhookSender's), mark the batch's answered ones sent in one statement; until nothing is due. No channel read, no breaker,
 * no address check, the secret held in memory. Returns the deliveries not answered 2xx.
 */
const runFloor = async (dbUrl: string, channels: ReadonlyArray<BenchChannel>) => {
  const pool = new Pg.Pool({ connectionString: dbUrl, max: POOL_SIZE, application_name: "parley-bench-floor" })
  const agent = new Agent({ connect: { timeout: CONNECT_TIMEOUT_MS, lookup: pinnedLookup("127.0.0.1") } })
  const leaseS = (RECEIVE_TIMEOUT_MS * Math.ceil(BATCH_SIZE / CONCURRENCY) + 30_000) / 1000
  let failed = 0
  const send = async (channel: BenchChannel, row: { id: string; payload: unknown }, sent: Array<string>) => {
    const body = Buffer.from(JSON.stringify(row.payload))
    try {
      const response = await request(channel.url, {
        dispatcher: agent,
        method: "POST",
        headers: {
          "content-type": "application/json",
          "x-chat-event": "activity.created",
          "x-chat-delivery-id": row.id,
          "x-chat-signature": signatureHeader(channel.secret, body, Date.now() / 1000)
        },
        body,
        headersTimeout: RECEIVE_TIMEOUT_MS,
        bodyTimeout: RECEIVE_TIMEOUT_MS
      })
      await response.body.dump()
      if (response.statusCode < 200 || response.statusCode > 299) failed += 1
      else sent.push(row.id)
    } catch {
      failed += 1
    }
  }
  const loop = async (channel: BenchChannel) => {
    for (;;) {
      const { rows } = await pool.query<{ id: string; payload: unknown }>(CLAIM, [channel.id, BATCH_SIZE, leaseS])
      if (rows.length === 0) return
      let next = 0
      const sent: Array<string> = []
      await Promise.all(Array.from({ length: Math.min(CONCURRENCY, rows.length) }, async () => {
        while (next < rows.length) await send(channel, rows[next++]!, sent)
      }))
      if (sent.length > 0) await pool.query(MARK_SENT, [sent])
    }
  }
  try {
    await Promise.all(channels.map(loop))
  } finally {
    await agent.close()
    await pool.end()
  }
  return failed
}

/** Waits until `pending()` is 0, or has not fallen for `stallMs`; returns what is left. */
const drained = async (pending: () => Promise<number>, stallMs = 30_000) => {
  let last = Number.POSITIVE_INFINITY
  let movedAt = monotonicMs()
  for (;;) {
    const left = await pending()
    if (left === 0) return 0
    if (left < last) {
      last = left
      movedAt = monotonicMs()
    } else if (monotonicMs() - movedAt > stallMs) return left
    await sleep(250)
  }
}

// ---------------------------------------------------------------------------------------------
// Latency: R appends per second, append → webhook received

interface LatencyRow {
  readonly appended: number
  readonly appendErrors: ReadonlyArray<string>
  readonly appendErrorCount: number
  readonly skipped: number
  readonly appendP50: number
  readonly appendP99: number
  readonly latencies: Float64Array
  readonly missing: number
  readonly cores: Cores
}

/** Appends in flight at most (the open loop counts those it could not send). */
const MAX_OUTSTANDING = 256
/** After the window, how long the deliveries may make no progress before those left count as missing. */
const GRACE_MS = 10_000

const latencyScenario = async (
  node: Child,
  apiKey: string,
  conversations: ReadonlyArray<string>,
  receiver: Receiver,
  sampler: ReturnType<typeof cpuSampler>,
  dbUrl: string,
  options: Options
): Promise<LatencyRow> => {
  // FIFO: every kept socket is used every half second or so, none idles into the server's 5 s
  // keep-alive timeout and races its close (ECONNRESET), as LIFO's spare sockets did.
  const agent = new HttpAgent({ keepAlive: true, maxSockets: MAX_OUTSTANDING, scheduling: "fifo" })
  // Start time (monotonic ms) and answer time of each activity whose append started in the window.
  const started = new Map<string, { readonly start: number; readonly answered: number }>()
  const errors: Array<string> = []
  let errorCount = 0
  let outstanding = 0
  let skipped = 0
  let issued = 0
  const began = monotonicMs()
  const windowStart = began + options.warmupMs
  const windowEnd = windowStart + options.durationMs
  signalProbe(node)
  await new Promise<void>((resolveDone) => {
    const tick = setInterval(() => {
      const now = monotonicMs()
      if (now >= windowEnd) {
        clearInterval(tick)
        const wait = setInterval(() => {
          if (outstanding === 0) {
            clearInterval(wait)
            resolveDone()
          }
        }, 10)
        return
      }
      const due = Math.floor(((now - began) / 1000) * options.rate) - issued
      for (let i = 0; i < due; i++) {
        const conversationId = conversations[issued++ % conversations.length]!
        if (outstanding >= MAX_OUTSTANDING) {
          skipped += 1
          continue
        }
        outstanding += 1
        const start = monotonicMs()
        void append(agent, node.port, apiKey, conversationId).then((answer) => {
          outstanding -= 1
          if ("error" in answer) {
            errorCount += 1
            if (errors.length < 5) errors.push(answer.error)
          } else if (start >= windowStart) started.set(answer.id, { start, answered: monotonicMs() })
        })
      }
    }, 2)
  })
  agent.destroy()
  const deliveries = await withDatabase(dbUrl, async (client) =>
    (await client.query<{ id: string; activity_id: string }>(
      "SELECT id, activity_id FROM deliveries WHERE activity_id = ANY($1::uuid[])",
      [[...started.keys()]]
    )).rows)
  // Every activity of the window delivered, or no progress for GRACE_MS.
  const pool = new Pg.Pool({ connectionString: dbUrl, max: 1 })
  await drained(pendingOf(pool, "activity_id = ANY($1::uuid[])", [...started.keys()]), GRACE_MS).finally(() => pool.end())
  signalProbe(node)
  const report = await take(receiver)
  const received = new Map<string, number>()
  report.ids.forEach((id, i) => received.set(id, report.times[i]!))
  const latencies: Array<number> = []
  let missing = 0
  for (const delivery of deliveries) {
    const at = received.get(delivery.id)
    const append = started.get(delivery.activity_id)
    if (at === undefined || append === undefined) missing += 1
    else latencies.push(at - append.start)
  }
  const answers = Float64Array.from([...started.values()].map((a) => a.answered - a.start)).sort()
  return {
    appended: started.size,
    appendErrors: errors,
    appendErrorCount: errorCount,
    skipped,
    appendP50: percentile(answers, 0.5),
    appendP99: percentile(answers, 0.99),
    latencies: Float64Array.from(latencies).sort(),
    missing: missing + Math.max(0, started.size - deliveries.length),
    cores: sampler.cores(windowStart, windowEnd)
  }
}

// ---------------------------------------------------------------------------------------------
// Output

const group = (n: number) => Math.round(n).toLocaleString("en-US")
const ms = (n: number) => (Number.isNaN(n) ? "-" : n < 10 ? n.toFixed(1) : n.toFixed(0))
const cores = (n: number) => (Number.isNaN(n) ? "-" : n.toFixed(2))

const printTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>) => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)))
  const line = (cells: ReadonlyArray<string>) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ")
  console.log(line(header))
  for (const row of rows) console.log(line(row))
}

const TARGET_RATE = 2000

const printSaturation = (rows: ReadonlyArray<SaturationRow>, options: Options) => {
  console.log("")
  console.log(`saturation: a backlog of ${group(options.backlog)} activities on ${options.channels} webhook channels ` +
    `(batch ${BATCH_SIZE}, ${CONCURRENCY} at once per channel)`)
  printTable(
    ["server", "deliveries/s", "received", "missing", "dupl.", "span s", "cores sender", "receiver", "bench", "pg+other", "sender µs/delivery", "sig. checked"],
    rows.map((r) => [
      r.name,
      group(r.rate),
      group(r.received),
      group(r.missing),
      group(r.duplicates),
      (r.spanMs / 1000).toFixed(1),
      cores(r.senderCores),
      cores(r.cores.receiver),
      cores(r.name === "floor" ? Number.NaN : r.cores.bench),
      cores(r.cores.other),
      group((r.senderCores * 1e6) / r.rate),
      `${r.signaturesChecked - r.signaturesFailed}/${r.signaturesChecked}`
    ])
  )
  const parley = rows.find((r) => r.name === "parley")
  const floor = rows.find((r) => r.name === "floor")
  if (parley !== undefined) console.log(`parley: ${group(parley.rate)} deliveries/s (target >= ${group(TARGET_RATE)}/s)`)
  if (parley !== undefined && floor !== undefined) console.log(`parley / floor: ${(parley.rate / floor.rate).toFixed(2)}x`)
  for (const r of rows) {
    if (r.signaturesFailed > 0) console.log(`${r.name}: ${r.signaturesFailed} signatures failed, e.g. ${r.signatureFailures.slice(0, 5).join("; ")}`)
    if (r.notSent > 0) console.log(`${r.name}: ${r.notSent} deliveries not sent (pending at the end, or not answered 2xx)`)
  }
}

const printLatency = (row: LatencyRow, options: Options) => {
  console.log("")
  console.log(`latency: ${options.rate} appends/s for ${options.durationMs / 1000} s (after ${options.warmupMs / 1000} s), ` +
    `append request start → webhook received`)
  printTable(
    ["appends", "append p50 / p99 ms", "delivered p50 / p99 / max ms", "missing", "not sent (behind)", "cores parley", "receiver", "bench", "pg+other"],
    [[
      group(row.appended),
      `${ms(row.appendP50)} / ${ms(row.appendP99)}`,
      `${ms(percentile(row.latencies, 0.5))} / ${ms(percentile(row.latencies, 0.99))} / ${ms(row.latencies[row.latencies.length - 1] ?? Number.NaN)}`,
      group(row.missing),
      group(row.skipped),
      cores(row.cores.server),
      cores(row.cores.receiver),
      cores(row.cores.bench),
      cores(row.cores.other)
    ]]
  )
  if (row.appendErrorCount > 0) console.log(`${row.appendErrorCount} append errors, e.g.: ${row.appendErrors.join("; ")}`)
}

// ---------------------------------------------------------------------------------------------

const main = async () => {
  const options = parseOptions(process.argv.slice(2))
  const run = startRun("delivery", options.serverUrl)
  const db = run.db.url

  await run.createDatabase()
  const receiver = await startReceiver(run.workDir)
  let node: Child | undefined = await startNode(run, "parley-1")
  const sampler = cpuSampler(() => node?.process.pid, receiver.child.process.pid!)
  let invalid = false
  try {
    const setup = await setUp(node, run, receiver.child.port, options)
    await receiver.send({ op: "secrets", secrets: Object.fromEntries([...setup.parley, ...setup.floor].map((c) => [c.name, c.secret])) })
    const key = { "x-api-key": setup.apiKey }
    const rows: Array<SaturationRow> = []
    if (options.only.has("saturation")) {
      process.stdout.write(`backlog: ${group(options.backlog)} appends to each side's paused channels ... `)
      const began = monotonicMs()
      const errors = [
        ...(await appendMany(node.port, setup.apiKey, setup.parley.flatMap((c) => c.conversations), options.backlog, options.clients)),
        ...(await appendMany(node.port, setup.apiKey, setup.floor.flatMap((c) => c.conversations), options.backlog, options.clients))
      ]
      console.log(`${((monotonicMs() - began) / 1000).toFixed(1)} s${errors.length > 0 ? `, ${errors.length} errors, e.g. ${errors[0]}` : ""}`)
      if (errors.length > 0) invalid = true
      // A paused channel's wake parks it: nothing should have been sent yet.
      const early = await take(receiver)
      if (early.ids.length > 0) console.log(`  (${early.ids.length} deliveries arrived while the channels were paused)`)
      await stopChild(node)
      node = undefined

      process.stdout.write("floor ... ")
      const floorIds = await deliveryIdsOf(db, setup.floor)
      const floorFailed = await runFloor(db, setup.floor)
      rows.push(saturationRow("floor", floorIds, await take(receiver), sampler, "bench", floorFailed))
      console.log(`${group(rows[0]!.rate)}/s`)

      process.stdout.write("parley ... ")
      node = await startNode(run, "parley-2")
      signalProbe(node)
      for (const channel of setup.parley) {
        expectStatus("channel resume", await call(node.port, "POST", `/api/v1/channels/${channel.id}/resume`, key), 200)
      }
      // Each resume wakes its channel's loop once committed (docs/delivery/channel-entity.md).
      const pool = new Pg.Pool({ connectionString: db, max: 1 })
      const left = await drained(pendingOf(pool, "channel_id = ANY($1::uuid[])", setup.parley.map((c) => c.id)))
        .finally(() => pool.end())
      signalProbe(node)
      const parleyIds = await deliveryIdsOf(db, setup.parley)
      rows.push(saturationRow("parley", parleyIds, await take(receiver), sampler, "server", left))
      console.log(`${group(rows[1]!.rate)}/s`)
      printSaturation(rows, options)
      if (rows.some((r) => r.missing > 0 || r.signaturesFailed > 0)) invalid = true
    }
    if (options.only.has("latency")) {
      node ??= await startNode(run, "parley-2")
      for (const channel of setup.parley) {
        expectStatus("channel resume", await call(node.port, "POST", `/api/v1/channels/${channel.id}/resume`, key), 200)
      }
      await take(receiver)
      const row = await latencyScenario(node, setup.apiKey, setup.parley.flatMap((c) => c.conversations), receiver, sampler, db, options)
      printLatency(row, options)
      if (row.appendErrorCount > 0 || row.missing > 0) invalid = true
    }
  } finally {
    sampler.stop()
    if (interrupted() === undefined) {
      if (node !== undefined) await stopChild(node)
      await stopChild(receiver.child, 3000)
      await run.dropDatabase()
    }
  }
  if (invalid) {
    console.log("INVALID: some appends failed or some deliveries did not arrive (above)")
    process.exitCode = 1
  }
}

void runBench(main)
