/**
 * Revocation propagation between two nodes (ADR 0025), as `npm run bench:revocation` and the
 * `revocation` scenario of `npm run bench` measure it. Two nodes on a fresh database; N times a token
 * is generated on one node, accepted by the other, revoked on the first, and the other asked every
 * 5 ms until it answers 401 `token_revoked`.
 */
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import Pg from "pg"
import { spawnNode } from "../support/NodeProcess.js"
import { channelSecretAt, revocationLagMs } from "../support/RevocationProbe.js"

export interface RevocationFigures {
  readonly count: number
  readonly p50: number
  readonly p99: number
  readonly max: number
}

const admin = async (serverUrl: string, statement: string) => {
  const client = new Pg.Client({ connectionString: serverUrl })
  await client.connect()
  try {
    await client.query(statement)
  } finally {
    await client.end()
  }
}

const percentile = (sorted: ReadonlyArray<number>, p: number) => sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!

/** Milliseconds from sending each of `count` revocations until the other node refuses the token; directions alternate. */
export const measureRevocationPropagation = async (
  serverUrl: string,
  count: number,
  signal?: AbortSignal
): Promise<RevocationFigures> => {
  const name = `parley_bench_${randomBytes(6).toString("hex")}`
  await admin(serverUrl, `CREATE DATABASE ${name}`)
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
    })), signal === undefined ? undefined : { signal })
    const sorted = [...lags].sort((x, y) => x - y)
    return { count, p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), max: sorted[sorted.length - 1]! }
  } finally {
    await admin(serverUrl, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  }
}

export const formatRevocationFigures = (figures: RevocationFigures) => {
  const ms = (n: number) => `${n.toFixed(0)} ms`
  return `revocation propagation, 2 nodes, ${figures.count} revocations: ` +
    `p50 ${ms(figures.p50)}  p99 ${ms(figures.p99)}  max ${ms(figures.max)}`
}
