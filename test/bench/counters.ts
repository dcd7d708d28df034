/**
 * Hardware counters of one process over the measured window, read with `perf stat` where the
 * machine allows it (not every virtual machine exposes them). Instructions per request do not move
 * with a busy host the way CPU time does: compare builds by them, and read IPC for how fast the
 * host ran.
 */
import { spawn, spawnSync } from "node:child_process"

export interface Counters {
  readonly instructions: number
  readonly cycles: number
}

export interface CounterRun {
  /** Stops counting; undefined when perf gave no numbers. */
  readonly stop: () => Promise<Counters | undefined>
}

const EVENTS = "instructions,cycles"

/** Whether `perf stat` can count instructions here. */
export const countersAvailable = (): boolean => {
  const probe = spawnSync("perf", ["stat", "-x,", "-e", EVENTS, "true"], { encoding: "utf8" })
  return probe.status === 0 && parse(probe.stderr) !== undefined
}

/** `perf stat -x,` lines: value,unit,event,… (a value of `<not supported>` when unavailable). */
const parse = (text: string): Counters | undefined => {
  const values = new Map<string, number>()
  for (const line of text.split("\n")) {
    const [value, , event] = line.split(",")
    if (event !== undefined && value !== undefined && /^\d+$/.test(value)) values.set(event.replace(/:u$/, ""), Number(value))
  }
  const instructions = values.get("instructions")
  const cycles = values.get("cycles")
  return instructions === undefined || cycles === undefined ? undefined : { instructions, cycles }
}

/** Starts counting the process `pid` (all its threads) until `stop`. */
export const startCounters = (pid: number): CounterRun => {
  const perf = spawn("perf", ["stat", "-x,", "-e", EVENTS, "-p", String(pid)], { stdio: ["ignore", "ignore", "pipe"] })
  let output = ""
  perf.stderr.setEncoding("utf8")
  perf.stderr.on("data", (chunk: string) => (output += chunk))
  const exited = new Promise<void>((resolve) => {
    perf.once("exit", () => resolve())
    perf.once("error", () => resolve())
  })
  return {
    stop: async () => {
      perf.kill("SIGINT")
      await exited
      return parse(output)
    }
  }
}
