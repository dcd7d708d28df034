/**
 * Preloaded into a benchmarked server by `npm run bench -- --probe` (`node --import`). It measures
 * only inside the bench's window: the bench sends SIGUSR2 to open it and again to close it. On close
 * it appends one JSON line (`ProbeReport`) to `BENCH_PROBE_OUT`:
 * - every SQL statement pg sent, counted by text (patched `pg.Client.prototype.query`, which
 *   @effect/sql-pg, @effect/cluster and plain pg pools all go through);
 * - event-loop utilisation of the main thread and time spent in GC;
 * - Effect fibers started (forks and root fibers) and fiber runs (each time a fiber is resumed),
 *   by wrapping methods of effect's internal FiberRuntime class (the same module instance Parley uses);
 *   with `BENCH_PROBE_OPS=1` also every instruction the fiber run loop executes, by kind (slows
 *   the server down: use it for counts, not for timings);
 * - with `BENCH_CPU_PROFILE_DIR`, a `.cpuprofile` of the window (V8 sampling profiler), and with
 *   `BENCH_HEAP_PROFILE=1` as well a `.heapprofile` (sampled allocations, collected ones included), and
 *   with `BENCH_HEAP_PROFILE=promoted` one of the allocations no scavenge collected: what survived
 *   into the old generation (the server runs with `--expose-gc` then, for a last scavenge before the
 *   profile is taken, so that the young generation's garbage is not counted).
 * A tool for the benchmark only; nothing in src/ knows about it.
 */
import { writeFileSync, appendFileSync, mkdirSync } from "node:fs"
import { Session } from "node:inspector"
import { join } from "node:path"
import { PerformanceObserver, performance, type EventLoopUtilization } from "node:perf_hooks"
import Pg from "pg"

/** What the probe reports for one window. */
export interface ProbeReport {
  readonly windowMs: number
  readonly eventLoopUtilization: number
  readonly gcMs: number
  readonly gcCount: number
  readonly queries: Record<string, number>
  readonly fibersStarted: number
  readonly fiberRuns: number
  readonly effectOps: Record<string, number>
  readonly profile: string | null
  readonly heapProfile: string | null
}

const outFile = process.env["BENCH_PROBE_OUT"]
const profileDir = process.env["BENCH_CPU_PROFILE_DIR"]
const processName = process.env["BENCH_PROBE_NAME"] ?? `pid${process.pid}`
const heapMode = process.env["BENCH_HEAP_PROFILE"]
const heapProfile = profileDir !== undefined && (heapMode === "1" || heapMode === "promoted")
const promotedOnly = heapMode === "promoted"

const counts = new Map<string, number>()
let open = false

const normalize = (text: string) => text.replace(/\s+/g, " ").trim().slice(0, 160)

const textOf = (first: unknown): string => {
  if (typeof first === "string") return first
  if (typeof first === "object" && first !== null && "text" in first && typeof first.text === "string") return first.text
  return "<unknown query>"
}

type Query = typeof Pg.Client.prototype.query
const originalQuery: Query = Pg.Client.prototype.query
Pg.Client.prototype.query = function(this: Pg.Client, ...args: Array<unknown>): unknown {
  if (open) {
    const key = normalize(textOf(args[0]))
    counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  return Reflect.apply(originalQuery, this, args)
} as unknown as Query

const countOps = process.env["BENCH_PROBE_OPS"] === "1"
const ops = new Map<string, number>()
let fibersStarted = 0
let fiberRuns = 0

type Method = (...args: Array<unknown>) => unknown
const wrap = (proto: Record<string, unknown>, name: string, count: () => void) => {
  const original = proto[name]
  if (typeof original !== "function") return
  proto[name] = function(this: unknown, ...args: Array<unknown>) {
    if (open) count()
    return Reflect.apply(original as Method, this, args)
  }
}
const fiberRuntimeUrl = new URL("./internal/fiberRuntime.js", import.meta.resolve("effect"))
const fiberRuntime = (await import(fiberRuntimeUrl.href)) as { FiberRuntime?: { prototype: Record<string, unknown> } }
if (fiberRuntime.FiberRuntime !== undefined) {
  const proto = fiberRuntime.FiberRuntime.prototype
  for (const name of ["resume", "start", "startFork"]) wrap(proto, name, () => (fibersStarted += 1))
  wrap(proto, "evaluateEffect", () => (fiberRuns += 1))
  if (countOps) {
    // The run loop dispatches on `this[op._op](op)`: one prototype method per instruction kind.
    const kinds = ["Async", "Commit", "Failure", "OnFailure", "OnSuccess", "OnSuccessAndFailure", "Success", "Sync", "Tag",
      "UpdateRuntimeFlags", "While", "Iterator", "WithRuntime", "Yield", "Left", "Right", "Some", "None", "Micro", "OnStep"]
    for (const kind of kinds) wrap(proto, kind, () => ops.set(kind, (ops.get(kind) ?? 0) + 1))
  }
}

let gcMs = 0
let gcCount = 0
const gcObserver = new PerformanceObserver((list) => {
  if (!open) return
  for (const entry of list.getEntries()) {
    gcMs += entry.duration
    gcCount += 1
  }
})
gcObserver.observe({ entryTypes: ["gc"] })

const session = profileDir === undefined ? undefined : new Session()
if (session !== undefined) {
  session.connect()
  session.post("Profiler.enable")
  session.post("Profiler.setSamplingInterval", { interval: 500 })
}

let windowIndex = 0
let openedAt = 0
let eluAtOpen: EventLoopUtilization | undefined

const openWindow = () => {
  counts.clear()
  ops.clear()
  fibersStarted = 0
  fiberRuns = 0
  gcMs = 0
  gcCount = 0
  openedAt = performance.now()
  eluAtOpen = performance.eventLoopUtilization()
  open = true
  session?.post("Profiler.start")
  if (heapProfile) {
    session?.post("HeapProfiler.startSampling", {
      samplingInterval: 16384,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: !promotedOnly
    })
  }
}

const write = (report: ProbeReport) => {
  if (outFile !== undefined) appendFileSync(outFile, JSON.stringify(report) + "\n")
}

const closeWindow = () => {
  open = false
  windowIndex += 1
  const elu = performance.eventLoopUtilization(eluAtOpen)
  const base = {
    windowMs: performance.now() - openedAt,
    eventLoopUtilization: elu.utilization,
    gcMs,
    gcCount,
    fibersStarted,
    fiberRuns,
    effectOps: Object.fromEntries([...ops.entries()].sort((a, b) => b[1] - a[1])),
    queries: Object.fromEntries([...counts.entries()].sort((a, b) => b[1] - a[1]))
  }
  if (session === undefined || profileDir === undefined) return write({ ...base, profile: null, heapProfile: null })
  mkdirSync(profileDir, { recursive: true })
  const stem = join(profileDir, `${processName}-window${windowIndex}`)
  session.post("Profiler.stop", (error, result) => {
    const profile = error === null ? `${stem}.cpuprofile` : null
    if (profile !== null) writeFileSync(profile, JSON.stringify(result.profile))
    if (!heapProfile) return write({ ...base, profile, heapProfile: null })
    if (promotedOnly) (globalThis as { gc?: (options: { type: "minor" }) => void }).gc?.({ type: "minor" })
    session.post("HeapProfiler.stopSampling", (heapError, heap) => {
      const file = heapError === null ? `${stem}.heapprofile` : null
      if (file !== null) writeFileSync(file, JSON.stringify(heap.profile))
      write({ ...base, profile, heapProfile: file })
    })
  })
}

process.on("SIGUSR2", () => (open ? closeWindow() : openWindow()))
