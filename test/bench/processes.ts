/**
 * Child processes, setup calls and /proc readings for test/bench/realtime.ts (the append bench,
 * test/bench/appends.ts, keeps its own copies, with its probe and profile options).
 */
import { type ChildProcess, spawn } from "node:child_process"
import { createWriteStream, readFileSync } from "node:fs"
import { request } from "node:http"
import { createServer } from "node:net"
import { dirname, join, resolve } from "node:path"
import { fileURLToPath } from "node:url"
import Pg from "pg"

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..")

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

export const freePort = () =>
  new Promise<number>((resolvePort, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolvePort(port))
    })
  })

/** Two (or more) distinct free ports: two picks in a row can return the same one. */
export const freePorts = async (n: number) => {
  const ports = new Set<number>()
  while (ports.size < n) ports.add(await freePort())
  return [...ports]
}

export const tail = (file: string, lines = 30) => {
  try {
    return readFileSync(file, "utf8").split("\n").slice(-lines).join("\n")
  } catch {
    return ""
  }
}

export interface Child {
  readonly name: string
  readonly process: ChildProcess
  readonly port: number
  readonly logFile: string
  exited: boolean
}

const children = new Set<Child>()

process.on("exit", () => {
  for (const child of children) child.process.kill("SIGKILL")
})

/** `node <nodeArgs> [--import tsx] <script>`, its output in `<workDir>/<name>.log`; with an IPC channel when asked. */
export const startChild = (
  name: string,
  nodeArgs: ReadonlyArray<string>,
  script: string,
  port: number,
  env: Record<string, string>,
  workDir: string,
  ipc = false
): Child => {
  const logFile = join(workDir, `${name}.log`)
  const loader = script.endsWith(".ts") ? ["--import", "tsx"] : []
  const child = spawn(process.execPath, [...nodeArgs, ...loader, script], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ipc ? ["ignore", "pipe", "pipe", "ipc"] : ["ignore", "pipe", "pipe"]
  })
  const log = createWriteStream(logFile)
  child.stdout?.pipe(log)
  child.stderr?.pipe(log)
  const handle: Child = { name, process: child, port, logFile, exited: false }
  children.add(handle)
  child.once("exit", () => {
    handle.exited = true
    children.delete(handle)
  })
  return handle
}

export const stopChild = async (child: Child, graceMs = 15_000) => {
  if (child.exited) return
  const exited = new Promise<void>((r) => child.process.once("exit", () => r()))
  child.process.kill("SIGTERM")
  const timer = setTimeout(() => child.process.kill("SIGKILL"), graceMs)
  await exited
  clearTimeout(timer)
}

/** Every child still running, killed at once (Ctrl-C). */
export const killChildren = () => {
  for (const child of children) child.process.kill("SIGKILL")
}

/**
 * The node flags of `npm start` (`exec node <flags> dist/src/main.js` in package.json), so the bench
 * runs Parley with the runtime settings it ships with; BENCH_SERVER_NODE_ARGS replaces them.
 */
export const parleyNodeArgs = (): ReadonlyArray<string> => {
  const override = process.env["BENCH_SERVER_NODE_ARGS"]
  if (override !== undefined) return override.split(" ").filter((a) => a !== "")
  const scripts = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> }).scripts
  const words = (scripts["start"] ?? "").split(" ").filter((a) => a !== "")
  return words.slice(words.indexOf("node") + 1, -1).filter((a) => a.startsWith("--"))
}

/** One HTTP exchange for setup (not measured). */
export const call = (port: number, method: string, path: string, headers: Record<string, string>, body?: unknown) =>
  new Promise<{ status: number; body: unknown }>((resolveCall, reject) => {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body))
    const req = request(
      {
        host: "127.0.0.1",
        port,
        method,
        path,
        headers: {
          ...headers,
          ...(payload === undefined ? {} : { "content-type": "application/json", "content-length": payload.length })
        }
      },
      (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (chunk: Buffer) => chunks.push(chunk))
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8")
          let parsed: unknown = text
          try {
            parsed = text === "" ? null : JSON.parse(text)
          } catch {
            // not JSON: keep the text
          }
          resolveCall({ status: res.statusCode ?? 0, body: parsed })
        })
      }
    )
    req.on("error", reject)
    req.end(payload)
  })

export const waitUntilServing = async (child: Child, path: string, timeoutMs = 90_000) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (child.exited) throw new Error(`${child.name} exited during start-up:\n${tail(child.logFile)}`)
    try {
      const reply = await call(child.port, "GET", path, {})
      if (reply.status < 500) return
    } catch {
      // not listening yet
    }
    await sleep(200)
  }
  throw new Error(`${child.name} did not become ready within ${timeoutMs / 1000} s:\n${tail(child.logFile)}`)
}

export const withDatabase = async <A>(url: string, f: (client: Pg.Client) => Promise<A>): Promise<A> => {
  const client = new Pg.Client({ connectionString: url, application_name: "parley-bench-setup" })
  await client.connect()
  try {
    return await f(client)
  } finally {
    await client.end()
  }
}

const CLOCK_TICKS = 100

/** utime + stime of a process (all its threads), in seconds; undefined once it has exited. */
export const processCpu = (pid: number): number | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS
  } catch {
    return undefined
  }
}

/** Resident set size of a process in bytes (VmRSS), 0 once it has exited. */
export const processRss = (pid: number): number => {
  try {
    const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return match === null ? 0 : Number(match[1]) * 1024
  } catch {
    return 0
  }
}

/** Busy CPU seconds of the whole machine (all cores). */
export const machineBusy = (): number => {
  try {
    const line = readFileSync("/proc/stat", "utf8").split("\n")[0]!
    // user nice system idle iowait irq softirq steal: everything but idle and iowait is busy.
    const ticks = line.trim().split(/\s+/).slice(1, 9).map(Number)
    return ticks.reduce((sum, t, i) => (i === 3 || i === 4 ? sum : sum + t), 0) / CLOCK_TICKS
  } catch {
    return 0
  }
}

export const percentile = (sorted: ArrayLike<number>, q: number) =>
  sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!

/** A monotonic clock shared by every process of the machine (CLOCK_MONOTONIC), in milliseconds. */
export const monotonicMs = () => Number(process.hrtime.bigint()) / 1e6
