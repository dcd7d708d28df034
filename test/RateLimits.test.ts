import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Exit, Fiber, FiberId, Layer, Option, Schedule } from "effect"
import { AppConfig } from "../src/config/AppConfig.js"
import { CountersClientLive } from "../src/db/CountersClient.js"
import { DatabaseLive } from "../src/db/Database.js"
import { Metrics } from "../src/ops/Metrics.js"
import { pruneCounters, RateLimiter } from "../src/ratelimit/RateLimiter.js"
import { query, serverUrl, TestDatabase } from "./support/TestDatabase.js"
import { tcpProxy } from "./support/TcpProxy.js"
import { expectError } from "./support/Envelope.js"
import { eventually } from "./support/Eventually.js"
import { storedState, tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { admin, createTenant, request, TestNodeLive } from "./support/TestNode.js"

/** Reads again until `done` holds (counts sync every 100 ms, a sync may take up to 1 s), at most 5 s. */
const settled = <A, E, R>(read: Effect.Effect<A, E, R>, done: (value: A) => boolean) => eventually(read, done, { within: "5 seconds" })

// login_account gets a day-long window: the sync test must not see its window roll over.
const RATE_LIMITS = {
  token_create: { limit: 2, scale_ms: 60000 },
  login_account: { limit: 5, scale_ms: 86_400_000 }
}

/** The configuration of a node with these installation limits (and this database, when given). */
const configOf = (limits: object, databaseUrl?: string) =>
  AppConfig.Default.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(
    new Map([["RATE_LIMITS", JSON.stringify(limits)], ...(databaseUrl === undefined ? [] : [["DATABASE_URL", databaseUrl] as const])])
  ))))

/** Another node's limiter, on the same database or through `databaseUrl`. */
const otherLimiter = (databaseUrl?: string, limits: object = RATE_LIMITS, limiter = RateLimiter.Default) =>
  Effect.map(
    Layer.build(
      limiter.pipe(
        Layer.provide(CountersClientLive),
        Layer.provide(databaseUrl === undefined ? Layer.empty : DatabaseLive),
        Layer.provide(configOf(limits, databaseUrl)),
        Layer.provide(Metrics.Default)
      )
    ),
    Context.get(RateLimiter)
  )

layer(TestNodeLive({ RATE_LIMITS: JSON.stringify(RATE_LIMITS) }), {
  excludeTestServices: true
})("rate limits", (it) => {
  it.effect("a tenant override of activity_create answers 429 with retry-after and stores nothing more", () =>
    Effect.gen(function*() {
      const { channel, conversationId, key, tenant } = yield* tenantWithConversation
      yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { limits: { activity_create: { limit: 3, scale_ms: 60000 } } } })
      const path = `/conversations/${conversationId}/activities`
      for (let i = 0; i < 3; i++) expect((yield* tenantApi(key, "POST", path, { text: `m${i}` })).status).toBe(201)
      const before = yield* storedState(conversationId)
      expect(before?.["activities"]).toBe(3)
      // By key (the lean append route) and by channel token (the router): one bucket, one answer.
      for (const auth of [{ "x-api-key": key }, { "x-channel-token": channel.secret }]) {
        const refused = yield* request("POST", `/api/v1${path}`, { body: { text: "over" }, headers: auth })
        expectError(refused, 429, "rate_limited", { retry_after_ms: expect.any(Number) }, Object.keys(auth)[0])
        const ms = refused.body.error.details.retry_after_ms
        expect(ms).toBeGreaterThan(0)
        expect(ms).toBeLessThanOrEqual(60000)
        expect(Number(refused.headers.get("retry-after"))).toBe(Math.max(1, Math.ceil(ms / 1000)))
      }
      expect(yield* storedState(conversationId)).toEqual(before)
    }))

  it.effect("over the limit, a retry of a stored append gets its activity; a new append gets 429", () =>
    Effect.gen(function*() {
      const { conversationId, key, tenant } = yield* tenantWithConversation
      yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { limits: { activity_create: { limit: 1, scale_ms: 60000 } } } })
      const path = `/conversations/${conversationId}/activities`
      const first = yield* tenantApi(key, "POST", path, { text: "once" }, { "x-idempotency-key": "k-1" })
      expect(first.status).toBe(201)
      const retry = yield* tenantApi(key, "POST", path, { text: "once" }, { "x-idempotency-key": "k-1" })
      expect(retry.status).toBe(201)
      expect(retry.body.data.id).toBe(first.body.data.id)
      expect(retry.body.data.seq).toBe(1)
      const fresh = yield* tenantApi(key, "POST", path, { text: "twice" }, { "x-idempotency-key": "k-2" })
      expectError(fresh, 429, "rate_limited", { retry_after_ms: expect.any(Number) })
      // The key is looked up within the caller's reach only: another tenant over its limit gets 429.
      const other = yield* tenantWithConversation
      yield* admin("PATCH", `/tenants/${other.tenant.id}`, { tenant: { limits: { activity_create: { limit: 1, scale_ms: 60000 } } } })
      const own = yield* tenantApi(other.key, "POST", `/conversations/${other.conversationId}/activities`, { text: "mine" })
      expect(own.status).toBe(201)
      const foreign = yield* tenantApi(other.key, "POST", path, { text: "once" }, { "x-idempotency-key": "k-1" })
      expect(foreign.status).toBe(429)
      const rows = yield* query<{ n: string }>("SELECT count(*) AS n FROM activities WHERE conversation_id = $1", [conversationId])
      expect(Number(rows[0]!.n)).toBe(1)
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

  it.scoped("a tenant override comes before RATE_LIMITS, which comes before the default", () =>
    Effect.gen(function*() {
      // A node whose installation sets activity_create to 2 a day (the default is 100 a second); day
      // windows, so that no window ends during the test.
      const limiter = yield* otherLimiter(undefined, { activity_create: { limit: 2, scale_ms: 86_400_000 } })
      const accepted = (tenantId: string) =>
        Effect.all(
          Array.from({ length: 6 }, () => Effect.either(limiter.consume("activity_create", tenantId, tenantId))),
          { concurrency: 1 }
        ).pipe(Effect.map((decisions) => decisions.filter((d) => d._tag === "Right").length))
      const plain = yield* createTenant()
      const overridden = yield* createTenant({ limits: { activity_create: { limit: 4, scale_ms: 86_400_000 } } })
      expect(yield* accepted(plain.id)).toBe(2)
      expect(yield* accepted(overridden.id)).toBe(4)
    }))

  it.effect("the default applies without overrides; counts reach the shared table", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const key = crypto.randomUUID()
      for (let i = 0; i < 10; i++) yield* limiter.consume("publishable_token_ip", key, null)
      expect((yield* Effect.flip(limiter.consume("publishable_token_ip", key, null)))._tag).toBe("RateLimited")
      const rows = yield* settled(
        query<{ count: string }>("SELECT count FROM rate_limit_counters WHERE bucket = 'publishable_token_ip' AND key = $1", [key]),
        (found) => found.length > 0 && Number(found[0]!.count) === 10
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
      const before = yield* settled(version, (rows) => rows.length > 0)
      expect(before.map((r) => Number(r.count))).toEqual([1])
      // Several syncs (every 100 ms) later the row is the same version.
      yield* Effect.sleep("500 millis")
      expect(yield* version).toEqual(before)
      // Another node's count is still learned before the next decision: the sum reaches the limit.
      yield* query(
        `INSERT INTO rate_limit_counters (bucket, key, window_start, window_end, node, count)
         SELECT bucket, key, window_start, window_end, $2, 4 FROM rate_limit_counters WHERE bucket = 'login_account' AND key = $1`,
        [key, crypto.randomUUID()]
      )
      // A few syncs, however slow (polling by consuming would count toward the limit itself).
      yield* Effect.sleep("1500 millis")
      expect((yield* Effect.flip(limiter.consume("login_account", key, null)))._tag).toBe("RateLimited")
    }))

  it.scoped("each node stores its own absolute count; the limit holds for their sum", () =>
    Effect.gen(function*() {
      const here = yield* RateLimiter
      // A second node's limiter on the same database.
      const there = yield* otherLimiter()
      const key = crypto.randomUUID()
      for (let i = 0; i < 3; i++) yield* here.consume("login_account", key, null)
      for (let i = 0; i < 2; i++) yield* there.consume("login_account", key, null)
      const counts = query<{ count: string }>(
        "SELECT count FROM rate_limit_counters WHERE bucket = 'login_account' AND key = $1 ORDER BY count",
        [key]
      ).pipe(Effect.map((rows) => rows.map((r) => Number(r.count))))
      expect(yield* settled(counts, (found) => found.join() === "2,3")).toEqual([2, 3])
      // Both stored; each node learns the other's count at its next sync.
      yield* Effect.sleep("500 millis")
      // Several syncs later they still read 2 and 3: a repeated sync adds nothing.
      expect(yield* counts).toEqual([2, 3])
      expect((yield* Effect.flip(here.consume("login_account", key, null)))._tag).toBe("RateLimited")
      expect((yield* Effect.flip(there.consume("login_account", key, null)))._tag).toBe("RateLimited")
    }))

  // A connection gone silent (no reset, no answer) must not stop a node's syncs for good.
  it.scoped.skipIf(serverUrl === undefined)("a sync left without an answer gives way to the next one", () =>
    Effect.gen(function*() {
      const url = new URL((yield* TestDatabase).url!)
      const proxy = yield* tcpProxy({ host: url.hostname, port: Number(url.port || 5432) })
      url.host = `127.0.0.1:${proxy.port}`
      const there = yield* otherLimiter(url.toString())
      const key = crypto.randomUUID()
      proxy.holdFrom(key)
      for (let i = 0; i < 3; i++) yield* there.consume("login_account", key, null)
      const written = query<{ count: string }>(
        "SELECT count FROM rate_limit_counters WHERE bucket = 'login_account' AND key = $1",
        [key]
      ).pipe(
        Effect.filterOrFail((rows) => rows.length > 0, () => "not yet"),
        Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("10 seconds"))),
        Effect.orElseSucceed(() => [])
      )
      expect((yield* written).map((r) => Number(r.count))).toEqual([3])
      proxy.release()
    }))

  it.scoped.skipIf(serverUrl === undefined)("a decision whose read of the others' count outlasts its window is made in the next window", () =>
    Effect.gen(function*() {
      const url = new URL((yield* TestDatabase).url!)
      const proxy = yield* tcpProxy({ host: url.hostname, port: Number(url.port || 5432) })
      url.host = `127.0.0.1:${proxy.port}`
      const scale = 2_000
      const there = yield* otherLimiter(url.toString(), { login_ip: { limit: 1, scale_ms: scale } })
      const key = crypto.randomUUID()
      // A window that still has a second to run: another node has filled it.
      const windowStart = Math.floor((Date.now() + 1_000) / scale) * scale
      const windowEnd = windowStart + scale
      yield* query(
        "INSERT INTO rate_limit_counters (bucket, key, window_start, window_end, node, count) VALUES ('login_ip', $1, $2, $3, $4, 1)",
        [key, windowStart, windowEnd, crypto.randomUUID()]
      )
      // Late in that window this node sees the key first: it reads the others' count before deciding,
      // and the read (its database gone quiet) is answered only once the window has ended.
      yield* Effect.sleep(Math.max(0, windowEnd - 450 - Date.now()))
      proxy.freeze()
      const first = yield* Effect.fork(Effect.either(there.consume("login_ip", key, null)))
      yield* Effect.sleep(Math.max(0, windowEnd + 100 - Date.now()))
      proxy.restore()
      // The decision belongs to the window it is made in, which has room: no 429 for the ended one.
      // And what it accepted counts there: the next request is over the limit of 1.
      const decisions = [yield* Fiber.join(first), yield* Effect.either(there.consume("login_ip", key, null))]
      expect(decisions.map((d) => d._tag)).toEqual(["Right", "Left"])
      // With the database silent, every read outlasts a one-second window: a key seen late in one
      // is still decided (locally) after one read, not held while the silence lasts.
      const silent = yield* otherLimiter(url.toString(), { login_ip: { limit: 1, scale_ms: 1_000 } })
      yield* Effect.sleep(1_500 - (Date.now() % 1_000))
      proxy.freeze()
      const decided = yield* Effect.either(silent.consume("login_ip", crypto.randomUUID(), null)).pipe(
        Effect.timeout("5 seconds"),
        Effect.option
      )
      proxy.restore()
      expect(Option.map(decided, (d) => d._tag)).toEqual(Option.some("Right"))
    }))

  it.effect("a node that first sees a key late in its window learns what the others counted before deciding", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const key = crypto.randomUUID()
      // Another node filled today's login_account window (limit 5 a day here) hours ago.
      const day = RATE_LIMITS.login_account.scale_ms
      const windowStart = Math.floor(Date.now() / day) * day
      yield* query(
        "INSERT INTO rate_limit_counters (bucket, key, window_start, window_end, node, count) VALUES ('login_account', $1, $2, $3, $4, 5)",
        [key, windowStart, windowStart + day, crypto.randomUUID()]
      )
      // Already the first decision here refuses, and so do the ones made while it was reading.
      const first = yield* Effect.all(
        Array.from({ length: 3 }, () => Effect.flip(limiter.consume("login_account", key, null))),
        { concurrency: "unbounded" }
      )
      expect(first.map((e) => e._tag)).toEqual(["RateLimited", "RateLimited", "RateLimited"])
    }))

  it.effect("thousands of keys first seen at once all learn what the others counted before deciding", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const prefix = crypto.randomUUID()
      const day = RATE_LIMITS.login_account.scale_ms
      const windowStart = Math.floor(Date.now() / day) * day
      // Another node filled today's window of 20,000 accounts (a credential-stuffing run, say).
      yield* query(
        `INSERT INTO rate_limit_counters (bucket, key, window_start, window_end, node, count)
         SELECT 'login_account', $1 || i, $2, $3, $4, 5 FROM generate_series(1, 20000) AS i`,
        [prefix, windowStart, windowStart + day, crypto.randomUUID()]
      )
      const decisions = yield* Effect.all(
        Array.from({ length: 20_000 }, (_, i) => Effect.either(limiter.consume("login_account", `${prefix}${i + 1}`, null))),
        { concurrency: 2_000 }
      )
      expect(decisions.filter((d) => d._tag === "Right")).toHaveLength(0)
    }), { timeout: 60_000 })

  it.scoped("a flood of keys seen once does not keep a busy key's count from the other nodes", () =>
    Effect.gen(function*() {
      const here = yield* RateLimiter
      const there = yield* otherLimiter()
      const prefix = crypto.randomUUID()
      // 150,000 accounts tried once each (limit 5 a day here), and one tried three times.
      yield* Effect.forEach(
        Array.from({ length: 150_000 }, (_, i) => `${prefix}${i}`),
        (key) => here.consume("login_account", key, null),
        { concurrency: 5_000, discard: true }
      )
      const busy = crypto.randomUUID()
      for (let i = 0; i < 3; i++) yield* here.consume("login_account", busy, null)
      const written = yield* settled(
        query<{ count: string }>("SELECT count FROM rate_limit_counters WHERE bucket = 'login_account' AND key = $1", [busy]),
        (rows) => rows.length > 0
      )
      expect(written.map((r) => Number(r.count))).toEqual([3])
      // The other node sees them before its own decisions: two more, then the limit.
      const decisions = yield* Effect.all(
        Array.from({ length: 4 }, () => Effect.either(there.consume("login_account", busy, null))),
        { concurrency: 1 }
      )
      expect(decisions.map((d) => d._tag)).toEqual(["Right", "Right", "Left", "Left"])
    }), { timeout: 180_000 })

  it.scoped("a flood of new client addresses past the bound does not reset a busy address's count", () =>
    Effect.gen(function*() {
      // Day windows: the returning address must read its count back, not start a new window.
      const limiter = yield* otherLimiter(undefined, { login_ip: { limit: 2, scale_ms: 86_400_000 } }, RateLimiter.keepingIpWindows(10))
      const busy = `198.51.100.${Math.floor(Math.random() * 250)}`
      const prefix = `2001:db8:${Math.floor(Math.random() * 65_536).toString(16)}`
      for (let i = 0; i < 2; i++) yield* limiter.consume("login_ip", busy, null)
      yield* settled(
        query<{ count: string }>("SELECT count FROM rate_limit_counters WHERE bucket = 'login_ip' AND key = $1", [busy]),
        (rows) => rows.length > 0
      )
      // Fifty new /64s, each seen once: the busy address's window is forgotten here.
      for (let i = 0; i < 50; i++) yield* limiter.consume("login_ip", `${prefix}:${i.toString(16)}::1`, null)
      expect((yield* Effect.flip(limiter.consume("login_ip", busy, null)))._tag).toBe("RateLimited")
    }))

  it.scoped("a caller interrupted as its key starts learning the others' count does not hold up the key's later decisions", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const key = crypto.randomUUID()
      // The interruption (a client gone) reaches the caller at its first clock reading, right where
      // the slot decides to learn: the next step is the one that marks the slot and starts the read.
      const realNow = Date.now
      yield* Effect.addFinalizer(() => Effect.sync(() => (Date.now = realNow)))
      let target: Fiber.RuntimeFiber<unknown, unknown> | undefined
      Date.now = () => {
        const current = Fiber.getCurrentFiber()
        if (target !== undefined && Option.isSome(current) && current.value === target) {
          target.unsafeInterruptAsFork(FiberId.none)
          target = undefined
        }
        return realNow()
      }
      const first = yield* Effect.fork(limiter.consume("login_account", key, null))
      target = first
      // The interruption did reach the caller at that point.
      expect(Exit.isInterrupted(yield* Fiber.await(first))).toBe(true)
      expect(target).toBeUndefined()
      Date.now = realNow
      const next = yield* limiter.consume("login_account", key, null).pipe(Effect.timeout("10 seconds"), Effect.either)
      expect(next._tag).toBe("Right")
    }))

  it.effect("a changed tenant override is in force for the next burst after a second", () =>
    Effect.gen(function*() {
      const limiter = yield* RateLimiter
      const tenant = yield* createTenant({ limits: { activity_create: { limit: 5, scale_ms: 60000 } } })
      yield* limiter.consume("activity_create", tenant.id, tenant.id)
      yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { limits: { activity_create: { limit: 2, scale_ms: 60000 } } } })
      yield* Effect.sleep("1100 millis")
      const burst = yield* Effect.all(
        Array.from({ length: 6 }, () => Effect.either(limiter.consume("activity_create", tenant.id, tenant.id))),
        { concurrency: "unbounded" }
      )
      // One accepted before the change, one more now: the new limit of 2, not the old 5 (which would take 4
      // more). The windows are aligned to the minute: if one began during the sleep, 2 fit in it.
      const accepted = burst.filter((r) => r._tag === "Right").length
      expect(accepted).toBeGreaterThanOrEqual(1)
      expect(accepted).toBeLessThanOrEqual(2)
    }))

  it.effect("pruning removes windows that ended, and keeps long windows that began hours ago", () =>
    Effect.gen(function*() {
      const key = crypto.randomUUID()
      const now = Date.now()
      const rows: ReadonlyArray<readonly [string, number, number]> = [
        ["ended", now - 3 * 3_600_000, now - 2 * 3_600_000],
        ["long", now - 3 * 3_600_000, now + 21 * 3_600_000],
        ["current", now - 500, now + 500]
      ]
      for (const [bucket, start, end] of rows) {
        yield* query(
          "INSERT INTO rate_limit_counters (bucket, key, window_start, window_end, node, count) VALUES ($1, $2, $3, $4, $5, 1)",
          [bucket, key, start, end, crypto.randomUUID()]
        )
      }
      yield* pruneCounters
      const kept = yield* query<{ bucket: string }>("SELECT bucket FROM rate_limit_counters WHERE key = $1 ORDER BY bucket", [key])
      expect(kept.map((r) => r.bucket)).toEqual(["current", "long"])
    }))
})
