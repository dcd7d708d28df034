/**
 * What the benches measure with: CPU and memory of processes and of the machine from /proc (Linux),
 * the monotonic clock every process of the machine shares, and percentiles. Imported by the benches'
 * own child processes too (the listeners, the webhook receiver), so it starts nothing.
 */
import { readFileSync } from "node:fs"

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
