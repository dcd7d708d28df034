import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import Pg from "pg"
import { type DeliverySender, Outcome, SenderOverrides } from "../src/delivery/DeliverySender.js"
import { eventually } from "./support/Eventually.js"
import { insertChannel, insertConversation, tenantApi } from "./support/Fixtures.js"
import { query, TestDatabase } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

/** What the test sender does for a channel: answer success, a retryable failure or a permanent one. */
type Mode = "ok" | "retry" | "permanent"
const modes = new Map<string, Mode>()

/** Every call of the test sender: the delivery, its attempts so far, and the breaker state stored then. */
interface Call {
  readonly channelId: string
  readonly deliveryId: string
  readonly attempts: number
  readonly storedState: string
  readonly at: number
}
const calls: Array<Call> = []
let pool: Pg.Pool | undefined

/** A test-only sender (type `email` here), registered through the registry's override layer. */
const testSender: DeliverySender = {
  send: (delivery, channel) =>
    Effect.promise(async () => {
      // Taken before anything is awaited: as close as the test gets to the loop's own send time.
      const at = Date.now()
      const { rows } = await pool!.query<{ circuit_state: string }>("SELECT circuit_state FROM channels WHERE id = $1", [channel.id])
      calls.push({
        channelId: channel.id,
        deliveryId: delivery.id,
        attempts: delivery.attempts,
        storedState: rows[0]!.circuit_state,
        at
      })
      const mode = modes.get(channel.id) ?? "ok"
      return mode === "ok"
        ? Outcome.Sent({ providerMessageId: Option.some(`test-${delivery.id}`) })
        : mode === "retry"
        ? Outcome.Retry({ afterMs: Option.none(), error: "test receiver unavailable" })
        : Outcome.Permanent({ error: "test receiver refused" })
    })
}

const NodeWithTestSender = TestNodeLive({
  DELIVERY_SWEEP_MS: "300",
  DELIVERY_BREAKER_FAILURES: "3",
  DELIVERY_BREAKER_COOLDOWN_MS: "1000"
}).pipe(Layer.provide(Layer.succeed(SenderOverrides, new Map([["email", testSender]]))))

const usePool = Effect.gen(function*() {
  const { url } = yield* TestDatabase
  if (pool !== undefined) return
  pool = new Pg.Pool({ connectionString: url!, max: 4 })
  // The test database is dropped (its sessions ended) when the layer closes.
  pool.on("error", () => {})
})

const policy = (channelId: string, retryPolicy: object) =>
  query(`UPDATE channels SET retry_policy = $2 WHERE id = $1`, [channelId, JSON.stringify(retryPolicy)])

const post = (key: string, conversationId: string, text: string) =>
  Effect.map(tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text }), (reply) => {
    expect(reply.status).toBe(201)
    return reply.body.data as { id: string }
  })

const deliveryOf = (activityId: string) =>
  Effect.map(
    query<{ id: string; status: string; attempts: number; last_error: string | null; provider_message_id: string | null }>(
      `SELECT id, status, attempts, last_error, provider_message_id FROM deliveries WHERE activity_id = $1`,
      [activityId]
    ),
    (rows) => rows[0]
  )

const stateOf = (channelId: string) =>
  Effect.map(query<{ circuit_state: string }>(`SELECT circuit_state FROM channels WHERE id = $1`, [channelId]), (rows) => rows[0]!.circuit_state)

const activitiesOf = (conversationId: string) =>
  query<{ seq: number; sender: string; text: string | null; source_channel_id: string | null }>(
    `SELECT seq::int AS seq, sender, text, source_channel_id FROM activities WHERE conversation_id = $1 ORDER BY seq`,
    [conversationId]
  )

/** A tenant with a channel of `type` and a conversation whose origin it is. */
const setUp = (type: string) =>
  Effect.gen(function*() {
    yield* usePool
    const tenant = yield* createTenant()
    const channel = yield* insertChannel(tenant.id, { type })
    const conversationId = yield* insertConversation(tenant.id, channel.id)
    return { tenant, channelId: channel.id, conversationId, key: tenant.api_key }
  })

layer(NodeWithTestSender, { excludeTestServices: true })("channel delivery", (it) => {
  describe("echo", () => {
    it.effect("answers a message once with the same text, from `echo`, and never echoes its echo", () =>
      Effect.gen(function*() {
        const { channelId, conversationId, key } = yield* setUp("echo")
        const activity = yield* post(key, conversationId, "hello echo")
        const delivery = yield* eventually(deliveryOf(activity.id), (d) => d?.status === "sent", { what: "echo delivery sent" })
        expect(delivery!.attempts).toBe(1)
        const stored = yield* eventually(activitiesOf(conversationId), (rows) => rows.length >= 2, { what: "echo reply" })
        expect(stored.map((a) => [a.seq, a.sender, a.text, a.source_channel_id])).toEqual([
          [1, stored[0]!.sender, "hello echo", null],
          [2, "echo", "hello echo", channelId]
        ])
        // The echo came from the echo channel: no delivery is planned for it, so nothing answers it.
        const deliveries = yield* query(`SELECT id FROM deliveries WHERE conversation_id = $1`, [conversationId])
        expect(deliveries.length).toBe(1)
      }))

    it.effect("sends without answering an activity that came from an echo channel (found by the sweep)", () =>
      Effect.gen(function*() {
        const { channelId, conversationId, tenant } = yield* setUp("echo")
        const other = yield* insertChannel(tenant.id, { type: "echo" })
        // An activity from another echo channel and its delivery, stored directly: no wake is sent.
        const activityId = crypto.randomUUID()
        yield* query(
          `INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text, source_channel_id)
           VALUES ($1, 1, $2, $3, 'message', 'echo', 'ping', $4)`,
          [conversationId, activityId, tenant.id, other.id]
        )
        yield* query(`UPDATE conversations SET head_seq = 1 WHERE id = $1`, [conversationId])
        yield* query(
          `INSERT INTO deliveries (id, tenant_id, activity_id, conversation_id, channel_id, payload, next_attempt_at)
           VALUES ($1, $2, $3, $4, $5, $6, now())`,
          [crypto.randomUUID(), tenant.id, activityId, conversationId, channelId,
            JSON.stringify({ id: activityId, type: "message", text: "ping", sender: "echo", source_channel_id: other.id })]
        )
        yield* eventually(deliveryOf(activityId), (d) => d?.status === "sent", { what: "swept delivery sent" })
        expect((yield* activitiesOf(conversationId)).length).toBe(1)
      }))
  })

  describe("retries", () => {
    it.effect("follows the channel's retry policy with the same delivery id and dead-letters when attempts run out", () =>
      Effect.gen(function*() {
        const { channelId, conversationId, key } = yield* setUp("email")
        modes.set(channelId, "retry")
        yield* policy(channelId, { max_attempts: 2, backoff: "fixed", base_ms: 400, max_ms: 400, timeout_ms: 2000 })
        const activity = yield* post(key, conversationId, "retry me")
        const delivery = yield* eventually(deliveryOf(activity.id), (d) => d?.status === "failed", {
          what: "dead letter"
        })
        expect(delivery).toMatchObject({ attempts: 2, last_error: "test receiver unavailable" })
        const mine = calls.filter((c) => c.channelId === channelId)
        expect(mine.map((c) => [c.deliveryId, c.attempts])).toEqual([[delivery!.id, 0], [delivery!.id, 1]])
        // Fixed 400 ms with equal jitter: at least 200 ms between the attempts.
        expect(mine[1]!.at - mine[0]!.at).toBeGreaterThanOrEqual(190)
      }))

    it.effect("a permanent failure is a dead letter after one attempt", () =>
      Effect.gen(function*() {
        const { channelId, conversationId, key } = yield* setUp("email")
        modes.set(channelId, "permanent")
        const activity = yield* post(key, conversationId, "refuse me")
        const delivery = yield* eventually(deliveryOf(activity.id), (d) => d?.status === "failed", { what: "dead letter" })
        expect(delivery).toMatchObject({ attempts: 1, last_error: "test receiver refused" })
      }))

    it.effect("a success records sent, the attempt and the provider's message id", () =>
      Effect.gen(function*() {
        const { conversationId, key } = yield* setUp("email")
        const activity = yield* post(key, conversationId, "send me")
        const delivery = yield* eventually(deliveryOf(activity.id), (d) => d?.status === "sent", { what: "sent" })
        expect(delivery).toMatchObject({ attempts: 1, last_error: null, provider_message_id: `test-${delivery!.id}` })
      }))

    it.effect("a delivery claimed by an owner that died is sent again, same id, once its lease ends", () =>
      Effect.gen(function*() {
        const { channelId, conversationId, key } = yield* setUp("email")
        modes.set(channelId, "retry")
        yield* policy(channelId, { max_attempts: 5, backoff: "fixed", base_ms: 60_000, max_ms: 60_000, timeout_ms: 2000 })
        const activity = yield* post(key, conversationId, "claimed")
        const first = yield* eventually(deliveryOf(activity.id), (d) => d !== undefined && d.attempts === 1, { what: "first attempt" })
        // As a claim of a node that died mid-send: due again in a second, the attempt never recorded.
        modes.set(channelId, "ok")
        yield* query(`UPDATE deliveries SET next_attempt_at = now() + interval '1 second' WHERE id = $1`, [first!.id])
        const sent = yield* eventually(deliveryOf(activity.id), (d) => d?.status === "sent", { what: "sent after the lease" })
        expect(sent).toMatchObject({ id: first!.id, attempts: 2 })
      }))
  })

  describe("rate limit", () => {
    it.effect("sends no more than the channel's `limit` per `scale_ms`", () =>
      Effect.gen(function*() {
        const { channelId, conversationId, key } = yield* setUp("email")
        yield* query(`UPDATE channels SET rate_limit = '{"limit": 2, "scale_ms": 1000}' WHERE id = $1`, [channelId])
        const posted = yield* Effect.forEach(["r1", "r2", "r3", "r4", "r5"], (text) => post(key, conversationId, text))
        for (const activity of posted) yield* eventually(deliveryOf(activity.id), (d) => d?.status === "sent", { what: "sent" })
        const at = calls.filter((c) => c.channelId === channelId).map((c) => c.at)
        expect(at.length).toBe(5)
        // Two per second at most: the third send starts a second after the first, the fifth two seconds after.
        for (let i = 0; i + 2 < at.length; i++) expect(at[i + 2]! - at[i]!).toBeGreaterThanOrEqual(950)
      }))
  })

  describe("circuit breaker", () => {
    it.effect("opens after consecutive failures, parks, probes once half-open, and closes after a good probe", () =>
      Effect.gen(function*() {
        const { channelId, conversationId, key } = yield* setUp("email")
        modes.set(channelId, "retry")
        yield* policy(channelId, { max_attempts: 50, backoff: "fixed", base_ms: 50, max_ms: 50, timeout_ms: 2000 })
        const a = yield* post(key, conversationId, "a")
        yield* eventually(stateOf(channelId), (s) => s === "open", { what: "breaker open" })
        const b = yield* post(key, conversationId, "b")
        // Let probes fail for a while, then let the receiver recover.
        yield* eventually(
          Effect.sync(() => calls.filter((c) => c.channelId === channelId && c.storedState === "half_open").length),
          (n) => n >= 2,
          { what: "two failed probes" }
        )
        modes.set(channelId, "ok")
        yield* eventually(stateOf(channelId), (s) => s === "closed", { what: "breaker closed" })
        yield* eventually(deliveryOf(b.id), (d) => d?.status === "sent", { what: "parked delivery sent" })
        yield* eventually(deliveryOf(a.id), (d) => d?.status === "sent", { what: "first delivery sent" })
        const mine = calls.filter((c) => c.channelId === channelId)
        // Nothing is sent while the stored state is open; the first three failures opened it.
        expect(mine.some((c) => c.storedState === "open")).toBe(false)
        expect(mine.slice(0, 3).map((c) => c.storedState)).toEqual(["closed", "closed", "closed"])
        expect(mine[3]!.storedState).toBe("half_open")
        // The probe waited for the cool-down (1000 ms here) after the failure that opened the breaker.
        expect(mine[3]!.at - mine[2]!.at).toBeGreaterThanOrEqual(950)
        // The parked delivery was not tried while the breaker was open or probing with the other one.
        const bCalls = mine.filter((c) => c.deliveryId !== mine[0]!.deliveryId)
        expect(bCalls.every((c) => c.storedState !== "open")).toBe(true)
      }))

    it.effect("a pause parks the channel's deliveries until a resume", () =>
      Effect.gen(function*() {
        const { channelId, conversationId, key } = yield* setUp("email")
        yield* query(`UPDATE channels SET circuit_state = 'paused' WHERE id = $1`, [channelId])
        const activity = yield* post(key, conversationId, "paused")
        // A wake and several sweeps pass: nothing is sent while paused.
        yield* Effect.sleep("1500 millis")
        expect(yield* deliveryOf(activity.id)).toMatchObject({ status: "pending", attempts: 0 })
        expect(calls.some((c) => c.channelId === channelId)).toBe(false)
        // The tenant API's resume writes `closed`; the sweep finds the due delivery.
        yield* query(`UPDATE channels SET circuit_state = 'closed' WHERE id = $1`, [channelId])
        yield* eventually(deliveryOf(activity.id), (d) => d?.status === "sent", { what: "sent after resume" })
      }))
  })
})

// No sweep within the test: every delivery here is found through the wake sent after the append's commit.
layer(TestNodeLive({ DELIVERY_SWEEP_MS: "3600000" }), { excludeTestServices: true })("wake after commit", (it) => {
  it.effect("a burst of appends is echoed in full through coalesced wakes alone", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id, { type: "echo" })
      const conversationId = yield* insertConversation(tenant.id, channel.id)
      const texts = Array.from({ length: 20 }, (_, i) => `burst ${i}`)
      yield* Effect.forEach(texts, (text) => post(tenant.api_key, conversationId, text), { concurrency: "unbounded" })
      const stored = yield* eventually(
        activitiesOf(conversationId),
        (rows) => rows.filter((a) => a.sender === "echo").length >= texts.length,
        { what: "every message echoed" }
      )
      const echoed = stored.filter((a) => a.sender === "echo").map((a) => a.text).sort()
      expect(echoed).toEqual([...texts].sort())
      // Each reply is stored before its delivery is recorded as sent.
      yield* eventually(
        query(`SELECT id FROM deliveries WHERE conversation_id = $1 AND status <> 'sent'`, [conversationId]),
        (rows) => rows.length === 0,
        { what: "every delivery recorded as sent" }
      )
      const deliveries = yield* query(`SELECT id FROM deliveries WHERE conversation_id = $1`, [conversationId])
      expect(deliveries.length).toBe(texts.length)
    }))
})
