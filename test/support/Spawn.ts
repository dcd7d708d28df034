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
 * its own so that stopping it also stops what npm started. The scope kills the group if it is still
 * running.
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
    (child) =>
      Effect.sync(() => {
        if (child.process.exitCode === null && child.process.signalCode === null && child.process.pid !== undefined) {
          try {
            process.kill(-child.process.pid, "SIGKILL")
          } catch {
            // already gone
          }
        }
      })
  )

/** Sends `signal` to the child's whole process group (npm, sh and node). */
export const signalGroup = (child: Child, signal: NodeJS.Signals) =>
  Effect.sync(() => {
    if (child.process.pid !== undefined) process.kill(-child.process.pid, signal)
  })
