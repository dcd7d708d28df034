/**
 * Child processes and setup calls for the benches (test/bench/appends.ts, realtime.ts, delivery.ts;
 * a run's database, banner and signals are test/bench/run.ts's, the readings test/bench/measure.ts's).
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
  /** Where the probe (test/bench/probe.ts) appends its report of each window, if it is preloaded. */
  readonly probeFile: string | undefined
  exited: boolean
}

/** test/bench/probe.ts preloaded: SIGUSR2 opens and closes its window; a .cpuprofile of each with `cpuProfileDir`. */
export interface Probe {
  readonly cpuProfileDir?: string | undefined
}

const children = new Set<Child>()

process.on("exit", () => {
  for (const child of children) child.process.kill("SIGKILL")
})

/**
 * `node <nodeArgs> [--import tsx] <script>`, its output in `<workDir>/<name>.log`; with an IPC channel,
 * and the probe preloaded, when asked. Compiled JavaScript runs without tsx, exactly as `npm start` runs it.
 */
export const startChild = (
  name: string,
  nodeArgs: ReadonlyArray<string>,
  script: string,
  port: number,
  env: Record<string, string>,
  workDir: string,
  options: { readonly ipc?: boolean; readonly probe?: Probe | undefined } = {}
): Child => {
  const { ipc = false, probe } = options
  const logFile = join(workDir, `${name}.log`)
  const probeFile = probe === undefined ? undefined : join(workDir, `${name}.probe.jsonl`)
  const loader = script.endsWith(".ts") || probe !== undefined ? ["--import", "tsx"] : []
  // The probe's last scavenge before a profile of promoted allocations.
  const exposeGc = probe !== undefined && process.env["BENCH_HEAP_PROFILE"] === "promoted" ? ["--expose-gc"] : []
  const probeImport = probe === undefined ? [] : ["--import", join(ROOT, "test/bench/probe.ts")]
  const child = spawn(process.execPath, [...nodeArgs, ...exposeGc, ...loader, ...probeImport, script], {
    cwd: ROOT,
    env: {
      ...process.env,
      ...env,
      ...(probeFile === undefined ? {} : { BENCH_PROBE_OUT: probeFile, BENCH_PROBE_NAME: name }),
      ...(probe?.cpuProfileDir === undefined ? {} : { BENCH_CPU_PROFILE_DIR: probe.cpuProfileDir })
    },
    stdio: ipc ? ["ignore", "pipe", "pipe", "ipc"] : ["ignore", "pipe", "pipe"]
  })
  const log = createWriteStream(logFile)
  child.stdout?.pipe(log)
  child.stderr?.pipe(log)
  const handle: Child = { name, process: child, port, logFile, probeFile, exited: false }
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

/** Every child still running, stopped (a bench's end, however it ends). */
export const stopChildren = async () => {
  await Promise.all([...children].map((child) => stopChild(child)))
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
