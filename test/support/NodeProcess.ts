import { Data, Effect, Schedule } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { ADMIN_TOKEN, freePorts } from "./TestNode.js"

const repoRoot = fileURLToPath(new URL("../..", import.meta.url))

/** A Parley node running as a real process (`node --import tsx src/main.ts`, or another entry). */
export interface NodeProcess {
  readonly name: string
  readonly baseUrl: string
  readonly runnerPort: number
  readonly child: ChildProcess
  /** What the process wrote to stderr and stdout, for failure messages. */
  readonly output: () => string
  readonly exited: Promise<number | null>
}

/** A node that did not become ready: whether its process had exited, and what it wrote. */
class NodeStartFailed extends Data.TaggedError("NodeStartFailed")<{ readonly exited: boolean; readonly message: string }> {}

/** Ready, or a failure with its output as soon as the process has exited. */
const waitReady = (baseUrl: string, child: ChildProcess, output: () => string) =>
  Effect.tryPromise(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return "exited" as const
    const response = await fetch(`${baseUrl}/health/ready`)
    if (response.status !== 200) throw new Error(`not ready: ${response.status}`)
    return "ready" as const
  }).pipe(
    Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("90 seconds"))),
    Effect.filterOrFail((state) => state === "ready", () => "exited" as const),
    Effect.mapError((e) =>
      new NodeStartFailed({
        exited: e === "exited",
        message: `node at ${baseUrl} ${e === "exited" ? "exited" : "never became ready"}:\n${output()}`
      })
    )
  )

/** Starts a node on free ports and waits until it is ready; a node that is not is killed. */
const start = (name: string, env: Record<string, string>, entry: string) =>
  Effect.gen(function*() {
    const [port, runnerPort] = yield* freePorts(2)
    let log = ""
    const child = spawn(process.execPath, ["--import", "tsx", entry], {
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
    yield* waitReady(node.baseUrl, child, node.output).pipe(
      Effect.tapError(() => Effect.promise(() => stop(node)))
    )
    return node
  })

const stop = async (node: NodeProcess) => {
  if (node.child.exitCode === null && node.child.signalCode === null) node.child.kill("SIGKILL")
  await node.exited
}

/** Starts a node on free ports and waits until it is ready; it is killed when the scope closes. */
export const spawnNode = (name: string, env: Record<string, string>, entry = "src/main.ts") =>
  Effect.acquireRelease(
    start(name, env, entry).pipe(
      // A port free when picked can be taken before the node binds it (by an outgoing connection
      // of this machine): the node then exits at once, and another pick is as good.
      Effect.retry({ times: 3, while: (failure) => failure.exited && failure.message.includes("EADDRINUSE") }),
      Effect.mapError((failure) => new Error(failure.message)),
      Effect.orDie
    ),
    (node) => Effect.promise(() => stop(node))
  )
