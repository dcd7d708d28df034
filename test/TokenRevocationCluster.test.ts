import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { spawnNode } from "./support/NodeProcess.js"
import { channelSecretAt, revocationLagMs } from "./support/RevocationProbe.js"
import { TestDatabase, TestDatabaseLive } from "./support/TestDatabase.js"

/** Generous limits: every probe of the other node is a refresh, counted in the channel's bucket. */
const env = { RATE_LIMITS: JSON.stringify({ token_generate: { limit: 100000, scale_ms: 60000 } }) }

layer(TestDatabaseLive, { excludeTestServices: true })("token revocation across nodes", (it) => {
  it.scoped("a token revoked on one node is refused (401 token_revoked) on another within 2 s", () =>
    Effect.gen(function*() {
      const db = yield* TestDatabase
      const nodeEnv = { ...env, DATABASE_URL: db.url! }
      const [a, b] = yield* Effect.all([spawnNode("A", nodeEnv), spawnNode("B", nodeEnv)], { concurrency: 2 })
      const secret = yield* Effect.promise(() => channelSecretAt(a.baseUrl))
      for (const [from, to] of [[a, b], [b, a]] as const) {
        const lag = yield* Effect.promise(() => revocationLagMs(from.baseUrl, to.baseUrl, secret, 2000))
        expect(lag).toBeLessThan(2000)
      }
    }), { timeout: 180_000 })
})
