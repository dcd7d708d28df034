import { Effect, Schedule } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { ADMIN_TOKEN, freePorts } from "./TestNode.js"

const repoRoot = fileURLToPath(new URL("../..", import.meta.url))

/** A Parley node running as a real process (`node --import tsx src/main.ts`). */
export interface NodeProcess {
  readonly name: string
  readonly baseUrl: string
  readonly runnerPort: number
  readonly child: ChildProcess
  /** What the process wrote to stderr and stdout, for failure messages. */
  readonly output: () => string
  readonly exited: Promise<number | null>
}

/** Ready, or a failure with its output as soon as the process has exited. */
const waitReady = (baseUrl: string, child: ChildProcess, output: () => string) =>
  Effect.tryPromise(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return "exited" as const
    const response = await fetch(`${baseUrl}/health/ready`)
    if (response.status !== 200) throw new Error(`not ready: ${response.status}`)
    return "ready" as const
  }).pipe(
    Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("90 seconds"))),
    Effect.filterOrFail((state) => state === "ready", () => "exited"),
    Effect.mapError((e) => new Error(`node at ${baseUrl} ${e === "exited" ? "exited" : "never became ready"}:\n${output()}`)),
    Effect.orDie
  )

/** Starts a node on free ports and waits until it is ready; it is killed when the scope closes. */
export const spawnNode = (name: string, env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      const [port, runnerPort] = yield* freePorts(2)
      let log = ""
      const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
        cwd: repoRoot,
        env: {
          ...process.env,
          PORT: String(port),
          HOST: "127.0.0.1",
          CLUSTER_RUNNER_PORT: String(runnerPort),
          ADMIN_API_TOKEN: ADMIN_TOKEN,
          LOG_LEVEL: "warning",
          WEBHOOK_ALLOWED_HOSTS: "127.0.0.1",
          DRAIN_REFUSE_MS: "200",
          ...env
        },
        stdio: ["ignore", "pipe", "pipe"]
      })
      const keep = (chunk: Buffer) => {
        log = (log + chunk.toString("utf8")).slice(-20_000)
      }
      child.stdout!.on("data", keep)
      child.stderr!.on("data", keep)
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
      const node: NodeProcess = { name, baseUrl: `http://127.0.0.1:${port}`, runnerPort, child, output: () => log, exited }
      yield* waitReady(node.baseUrl, child, node.output)
      return node
    }),
    (node) =>
      Effect.promise(async () => {
        if (node.child.exitCode === null && node.child.signalCode === null) node.child.kill("SIGKILL")
        await node.exited
      })
  )
