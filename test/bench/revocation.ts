/**
 * Revocation propagation between two nodes (ADR 0025): `npm run bench:revocation [-- --count N]`.
 * Prints p50/p99/max of the time from sending a revocation until the other node refuses the token
 * (test/bench/revocation-propagation.ts). A tool, not a test: it asserts nothing.
 */
import os from "node:os"
import { formatRevocationFigures, measureRevocationPropagation } from "./revocation-propagation.js"

const serverUrl = process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/postgres"
const countArg = process.argv.indexOf("--count")
const count = countArg >= 0 ? Number(process.argv[countArg + 1]) : Number(process.env["BENCH_REVOCATIONS"] ?? 100)

measureRevocationPropagation(serverUrl, count).then(
  (figures) => console.log(`${formatRevocationFigures(figures)}, ${os.cpus().length} cores`),
  (error: unknown) => {
    console.error(error)
    process.exit(1)
  }
)
