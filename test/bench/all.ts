/**
 * `npm run bench`: the append bench (test/bench/appends.ts), then the realtime bench
 * (test/bench/realtime.ts), then the delivery bench (test/bench/delivery.ts), one after the other,
 * never at once (they would share the cores).
 *
 * Every argument goes to the append bench, except the names of `--only` (or BENCH_ONLY) that are
 * realtime scenarios (idle, fanout, throughput) or delivery scenarios (saturation, latency): those go
 * to their bench, and a bench none of whose scenarios is named does not run. `npm run bench:realtime -- …`
 * and `npm run bench:delivery -- …` take those benches' own flags.
 * The exit code is non-zero when any bench's was.
 */
import { spawnSync } from "node:child_process"

const REALTIME = new Set(["idle", "fanout", "throughput"])
const DELIVERY = new Set(["saturation", "latency"])

const args = process.argv.slice(2)
const onlyAt = args.indexOf("--only")
const onlyText = onlyAt >= 0 ? args[onlyAt + 1] ?? "" : process.env["BENCH_ONLY"]
const rest = onlyAt >= 0 ? [...args.slice(0, onlyAt), ...args.slice(onlyAt + 2)] : args
const names = onlyText === undefined ? undefined : onlyText.split(",").map((s) => s.trim()).filter((s) => s !== "")
const appendNames = names?.filter((n) => !REALTIME.has(n) && !DELIVERY.has(n))
const realtimeNames = names?.filter((n) => REALTIME.has(n))
const deliveryNames = names?.filter((n) => DELIVERY.has(n))

const run = (script: string, scriptArgs: ReadonlyArray<string>) => {
  const env = { ...process.env }
  delete env["BENCH_ONLY"]
  const result = spawnSync(process.execPath, ["--import", "tsx", script, ...scriptArgs], { stdio: "inherit", env })
  return result.status ?? 1
}

let status = 0
if (appendNames === undefined || appendNames.length > 0) {
  status = Math.max(status, run("test/bench/appends.ts", [...rest, ...(appendNames === undefined ? [] : ["--only", appendNames.join(",")])]))
}
if (realtimeNames === undefined || realtimeNames.length > 0) {
  console.log("")
  status = Math.max(status, run("test/bench/realtime.ts", realtimeNames === undefined ? [] : ["--only", realtimeNames.join(",")]))
}
if (deliveryNames === undefined || deliveryNames.length > 0) {
  console.log("")
  status = Math.max(status, run("test/bench/delivery.ts", deliveryNames === undefined ? [] : ["--only", deliveryNames.join(",")]))
}
process.exitCode = status
