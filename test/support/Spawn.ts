import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"

/** The repository root: where `npm start` and `npx tsx src/main.ts` run. */
export const repoRoot = fileURLToPath(new URL("../..", import.meta.url))

/** A child process of the test with everything it printed so far. */
export interface Child {
  readonly process: ChildProcess
  readonly stdout: () => string
  readonly stderr: () => string
  /** Completes with the exit code (or the signal's name) when the process ends. */
  readonly exited: Effect.Effect<number | string>
}

/**
 * npm prints its own warnings about the machine's npm configuration (e.g. an unknown `nodedir`
 * setting) on stderr; they are not the program's output.
 */
export const programLines = (stderr: string): ReadonlyArray<string> =>
  stderr.split("\n").filter((line) => line.trim() !== "" && !line.startsWith("npm warn"))

/**
 * Starts `command` in the repository with exactly `env` (plus PATH and HOME), in a process group of
 * its own so that stopping it also stops what npm started. Closing the scope kills the group.
 */
export const spawnInRepo = (command: string, args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.sync((): Child => {
      const child = spawn(command, args, {
        cwd: repoRoot,
        env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "", ...env },
        detached: true,
        stdio: ["ignore", "pipe", "pipe"]
      })
      let stdout = ""
      let stderr = ""
      child.stdout?.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")))
      child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")))
      const exit = new Promise<number | string>((resolve) =>
        child.once("exit", (code, signal) => resolve(code ?? signal ?? "unknown"))
      )
      return {
        process: child,
        stdout: () => stdout,
        stderr: () => stderr,
        exited: Effect.promise(() => exit)
      }
    }),
    // The whole group, even when the direct child has exited: what it started may outlive it.
    (child) =>
      Effect.sync(() => {
        if (child.process.pid === undefined) return
        try {
          process.kill(-child.process.pid, "SIGKILL")
        } catch {
          // the group is gone already
        }
      })
  )

/**
 * What `GET {baseUrl}/health/ready` answered: status, readiness state and `Connection` header, or
 * null when nothing answered.
 */
export const readiness = (baseUrl: string) =>
  Effect.promise(async () => {
    try {
      const response = await fetch(`${baseUrl}/health/ready`)
      const body = await response.json() as { readonly status?: string }
      return { status: response.status, state: body.status ?? null, connection: response.headers.get("connection") }
    } catch {
      return null
    }
  })

/**
 * Polls readiness until it is 200; fails if the child exits first. Bounded by the caller (a test
 * timeout), not here.
 */
export const waitUntilReady = (child: Child, baseUrl: string) =>
  Effect.gen(function*() {
    while (true) {
      if (child.process.exitCode !== null || child.process.signalCode !== null) {
        return yield* Effect.fail(new Error(`the node exited before it was ready:\n${child.stderr()}`))
      }
      const answer = yield* readiness(baseUrl)
      if (answer?.status === 200) return
      yield* Effect.sleep("50 millis")
    }
  })

/** Resident memory in KiB of every process in the child's group, by command line. */
export const groupRss = (child: Child) =>
  Effect.promise(() =>
    new Promise<ReadonlyArray<{ readonly pid: number; readonly rssKiB: number; readonly command: string }>>(
      (resolve) => {
        const ps = spawn("ps", ["-eo", "pid=,pgid=,rss=,args="], { stdio: ["ignore", "pipe", "ignore"] })
        let out = ""
        ps.stdout.on("data", (chunk: Buffer) => (out += chunk.toString("utf8")))
        ps.once("close", () => {
          const rows = out.split("\n").map((line) => line.trim().split(/\s+/)).filter((cols) => cols.length >= 4)
          resolve(
            rows
              .filter((cols) => Number(cols[1]) === child.process.pid)
              .map((cols) => ({ pid: Number(cols[0]), rssKiB: Number(cols[2]), command: cols.slice(3).join(" ") }))
          )
        })
      }
    )
  )
