import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { readFileSync, rmSync, writeFileSync } from "node:fs"

/** Lock files this process holds: a pid tells processes apart, not nodes of one process (tests). */
const heldLocks = new Set<string>()

/**
 * Whether process `pid` runs (EPERM: as another user's). A zombie does not: a killed node whose
 * parent died too stays one where nothing reaps it (PID 1 of many containers), holding its pid.
 */
const isRunning = (pid: number) => {
  try {
    process.kill(pid, 0)
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.charAt(stat.lastIndexOf(")") + 2) !== "Z"
  } catch {
    return true // no /proc (not Linux): the signal's answer stands
  }
}

/** Creates `path` holding this process's pid; the pid of the live process holding it otherwise. */
const tryLock = (path: string): number | undefined => {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, String(process.pid), { flag: "wx" })
      return undefined
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
    }
    const holder = Number(readFileSync(path, "utf8").trim())
    // Our own pid in a lock no node of this process holds: left by a crashed start (a container
    // restarted gives its process the same pid again).
    const stale = !Number.isInteger(holder) || holder <= 0 || (holder === process.pid
      ? !heldLocks.has(path)
      : !isRunning(holder))
    if (!stale) return holder
    rmSync(path, { force: true })
  }
  throw new Error("another start took it over meanwhile")
}

/**
 * Holds `<directory>.lock` (our pid inside) for the scope: PGlite takes no lock, and two nodes on one
 * `DATA_DIR` lost each other's acknowledged writes. A lock whose process is gone is taken over.
 */
export const lockDataDir = (directory: string) => {
  const path = `${directory}.lock`
  return Effect.acquireRelease(
    Effect.try({
      try: () => tryLock(path),
      catch: (cause) => new SqlError({ cause, message: `cannot lock the embedded database (${path})` })
    }).pipe(
      Effect.filterOrFail(
        (holder) => holder === undefined,
        (holder) =>
          new SqlError({
            cause: undefined,
            message: `the embedded database in ${directory} is in use by process ${holder} (DATA_DIR serves one node; ` +
              `delete ${path} if that process is not a Parley node)`
          })
      ),
      Effect.tap(() => Effect.sync(() => heldLocks.add(path)))
    ),
    () =>
      Effect.sync(() => {
        heldLocks.delete(path)
        rmSync(path, { force: true })
      })
  )
}
