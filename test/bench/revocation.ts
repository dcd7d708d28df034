/**
 * Revocation propagation between two nodes (ADR 0025): `npm run bench:revocation [-- --count N]`.
 * Two nodes on a fresh database; N times a token is generated on one node, accepted by the other,
 * revoked on the first, and the other asked every 5 ms until it answers 401 `token_revoked`. Prints
 * p50/p99/max of the time from sending the revocation. A tool, not a test: it asserts nothing.
 */
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import os from "node:os"
import Pg from "pg"
import { spawnNode } from "../support/NodeProcess.js"
import { channelSecretAt, revocationLagMs } from "../support/RevocationProbe.js"

const serverUrl = process.env["DATABASE_URL"] ?? "postgres://postgres@127.0.0.1:5432/postgres"
const countArg = process.argv.indexOf("--count")
const count = countArg >= 0 ? Number(process.argv[countArg + 1]) : Number(process.env["BENCH_REVOCATIONS"] ?? 100)

const admin = async (statement: string) => {
  const client = new Pg.Client({ connectionString: serverUrl })
  await client.connect()
  try {
    await client.query(statement)
  } finally {
    await client.end()
  }
}

const percentile = (sorted: ReadonlyArray<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!

const main = async () => {
  const name = `parley_bench_${randomBytes(6).toString("hex")}`
  await admin(`CREATE DATABASE ${name}`)
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  try {
    const lags = await Effect.runPromise(Effect.scoped(Effect.gen(function*() {
      const env = {
        DATABASE_URL: url.toString(),
        RATE_LIMITS: JSON.stringify({ token_generate: { limit: 1_000_000_000, scale_ms: 60000 } })
      }
      const [a, b] = yield* Effect.all([spawnNode("A", env), spawnNode("B", env)], { concurrency: 2 })
      const secret = yield* Effect.promise(() => channelSecretAt(a.baseUrl))
      const measured: Array<number> = []
      for (let i = 0; i < count; i++) {
        // Alternating directions: each node revokes half of the tokens.
        const [from, to] = i % 2 === 0 ? [a, b] : [b, a]
        measured.push(yield* Effect.promise(() => revocationLagMs(from.baseUrl, to.baseUrl, secret)))
      }
      return measured
    })))
    const sorted = [...lags].sort((x, y) => x - y)
    const ms = (n: number) => `${n.toFixed(0)} ms`
    console.log(`revocation propagation, 2 nodes, ${count} revocations, ${os.cpus().length} cores`)
    console.log(`p50 ${ms(percentile(sorted, 0.5))}  p99 ${ms(percentile(sorted, 0.99))}  max ${ms(sorted[sorted.length - 1]!)}`)
  } finally {
    await admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  }
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
