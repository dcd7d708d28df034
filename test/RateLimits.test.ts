import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { RateLimiter } from "../src/ratelimit/RateLimiter.js"
import { query } from "./support/TestDatabase.js"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { admin, TestNodeLive } from "./support/TestNode.js"

// login_account gets a day-long window: the sync test must not see its window roll over.
const RATE_LIMITS = {
  token_create: { limit: 2, scale_ms: 60000 },
  login_account: { limit: 5, scale_ms: 86_400_000 }
}

layer(TestNodeLive({ RATE_LIMITS: JSON.stringify(RATE_LIMITS) }), {
  excludeTestServices: true
})("rate limits", (it) => {
  it.effect("a tenant override of activity_create answers 429 with retry-after and stores nothing more", () =>
    Effect.gen(function*() {
      const { conversationId, key, tenant } = yield* tenantWithConversation
      yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { limits: { activity_create: { limit: 3, scale_ms: 60000 } } } })
      const path = `/conversations/${conversationId}/activities`
      for (let i = 0; i < 3; i++) expect((yield* tenantApi(key, "POST", path, { text: `m${i}` })).status).toBe(201)
      const refused = yield* tenantApi(key, "POST", path, { text: "over" })
      expect(refused.status).toBe(429)
      expect(refused.body.error.code).toBe("rate_limited")
      const ms = refused.body.error.details.retry_after_ms
      expect(ms).toBeGreaterThan(0)
      expect(ms).toBeLessThanOrEqual(60000)
      expect(Number(refused.headers.get("retry-after"))).toBe(Math.max(1, Math.ceil(ms / 1000)))
      const rows = yield* query<{ n: string }>("SELECT count(*) AS n FROM activities WHERE conversation_id = $1", [conversationId])
      expect(Number(rows[0]!.n)).toBe(3)
    }))

  it.effect("RATE_LIMITS overrides the built-in default; keys are counted apart", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const ip = `203.0.113.${Math.floor(Math.random() * 200)}`
      yield* limiter.consume("token_create", ip, null)
      yield* limiter.consume("token_create", ip, null)
      const third = yield* Effect.flip(limiter.consume("token_create", ip, null))
      expect(third._tag).toBe("RateLimited")
      yield* limiter.consume("token_create", `${ip}0`, null)
    }))

  it.effect("the default applies without overrides; counts reach the shared table", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const key = crypto.randomUUID()
      for (let i = 0; i < 10; i++) yield* limiter.consume("publishable_token_ip", key, null)
      expect((yield* Effect.flip(limiter.consume("publishable_token_ip", key, null)))._tag).toBe("RateLimited")
      yield* Effect.sleep("400 millis")
      const rows = yield* query<{ count: string }>(
        "SELECT count FROM rate_limit_counters WHERE bucket = 'publishable_token_ip' AND key = $1",
        [key]
      )
      expect(rows.map((r) => Number(r.count))).toEqual([10])
    }))

  it.effect("a window without new local counts is read, not rewritten, at each sync", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const key = crypto.randomUUID()
      yield* limiter.consume("login_account", key, null)
      const version = query<{ xmin: string; count: string }>(
        "SELECT xmin::text AS xmin, count FROM rate_limit_counters WHERE bucket = 'login_account' AND key = $1",
        [key]
      )
      yield* Effect.sleep("400 millis")
      const before = yield* version
      expect(before.map((r) => Number(r.count))).toEqual([1])
      // Several syncs (every 100 ms) later the row is the same version.
      yield* Effect.sleep("500 millis")
      expect(yield* version).toEqual(before)
      // Another node's count is still learned: the local view follows the table.
      yield* query(
        "UPDATE rate_limit_counters SET count = 5 WHERE bucket = 'login_account' AND key = $1",
        [key]
      )
      yield* Effect.sleep("400 millis")
      expect((yield* Effect.flip(limiter.consume("login_account", key, null)))._tag).toBe("RateLimited")
    }))
})
