import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { eventually } from "./support/Eventually.js"
import { insertConversation, tenantApi } from "./support/Fixtures.js"
import { createChannel, manage } from "./support/ManageClient.js"
import { query } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"
import { type Answer, webhookReceiver } from "./support/WebhookReceiver.js"

/**
 * No sweep within the tests (the first runs as the node starts, before any channel exists), and a
 * breaker that opens at the first retryable failure and stays open for an hour: whatever is sent
 * here is sent because an operator's change woke the channel's loop.
 */
const NoSweep = TestNodeLive({
  DELIVERY_SWEEP_MS: "3600000",
  DELIVERY_BREAKER_FAILURES: "1",
  DELIVERY_BREAKER_COOLDOWN_MS: "3600000"
})

/** Far below the sweep interval and the cool-down, long enough for a slow machine. */
const SOON = "15 seconds"

const RETRY_POLICY = { max_attempts: 1, backoff: "fixed", base_ms: 10, max_ms: 10, timeout_ms: 5000 }

/** A tenant with a webhook channel to a local receiver whose answer `answer` decides, and a conversation on it. */
const setUp = (answer: () => Answer, retryPolicy: object = RETRY_POLICY) =>
  Effect.gen(function*() {
    const hook = yield* webhookReceiver(answer)
    const tenant = yield* createTenant()
    const channel = yield* createChannel(tenant.api_key, { config: { url: hook.url }, retry_policy: retryPolicy })
    const conversationId = yield* insertConversation(tenant.id, channel.id)
    const api = (method: string, path: string, body?: unknown) =>
      Effect.map(tenantApi(tenant.api_key, method, path, body), (reply) => {
        expect(reply.status, JSON.stringify(reply.body)).toBeLessThan(300)
        return reply.body
      })
    const append = (text: string) =>
      Effect.map(api("POST", `/conversations/${conversationId}/activities`, { text }), (body) => body.data.id as string)
    return { hook, channelId: channel.id, api, append, key: tenant.api_key }
  })

const deliveryOf = (activityId: string) =>
  Effect.map(
    query<{ id: string; status: string; due: boolean }>(
      `SELECT id, status, next_attempt_at <= now() AS due FROM deliveries WHERE activity_id = $1`,
      [activityId]
    ),
    (rows) => rows[0]
  )

const stateOf = (channelId: string) =>
  Effect.map(query<{ circuit_state: string }>(`SELECT circuit_state FROM channels WHERE id = $1`, [channelId]), (rows) => rows[0]!.circuit_state)

layer(NoSweep, { excludeTestServices: true })("an operator's change wakes the channel's loop", (it) => {
  it.scoped("a resume sends what a pause parked, without waiting for the sweep", () =>
    Effect.gen(function*() {
      const { api, append, channelId, hook } = yield* setUp(() => ({ status: 200 }))
      yield* api("POST", `/channels/${channelId}/pause`)
      const activityId = yield* append("parked")
      // The append's wake finds the channel paused: its loop stops until something wakes it again.
      yield* Effect.sleep("1 second")
      expect(hook.received.length).toBe(0)
      expect(yield* deliveryOf(activityId)).toMatchObject({ status: "pending" })
      yield* api("POST", `/channels/${channelId}/resume`)
      yield* eventually(Effect.sync(() => hook.received.length), (n) => n === 1, { within: SOON, what: "delivery after the resume" })
      yield* eventually(deliveryOf(activityId), (d) => d?.status === "sent", { within: SOON, what: "recorded sent" })
    }))

  it.scoped("a resume of an open breaker sends at once instead of after the cool-down", () =>
    Effect.gen(function*() {
      let status = 503
      const { api, append, channelId, hook } = yield* setUp(
        () => ({ status }),
        { ...RETRY_POLICY, max_attempts: 5 }
      )
      const activityId = yield* append("refused, then fine")
      // The first failure opens the breaker: the loop waits out its hour-long cool-down.
      yield* eventually(stateOf(channelId), (state) => state === "open", { within: SOON, what: "breaker open" })
      yield* eventually(deliveryOf(activityId), (d) => d?.due === true, { within: SOON, what: "retry due" })
      status = 200
      yield* api("POST", `/channels/${channelId}/resume`)
      yield* eventually(deliveryOf(activityId), (d) => d?.status === "sent", { within: SOON, what: "sent after the resume" })
      expect(hook.received.length).toBe(2)
    }))

  it.scoped("replaying a dead letter, alone or with its channel's, wakes the channel", () =>
    Effect.gen(function*() {
      // A refusal (4xx) is permanent: one attempt, a dead letter, and the breaker stays closed.
      let status = 400
      const { api, append, channelId, hook } = yield* setUp(() => ({ status }))
      const first = yield* append("one")
      const second = yield* append("two")
      for (const activityId of [first, second]) {
        yield* eventually(deliveryOf(activityId), (d) => d?.status === "failed", { within: SOON, what: "dead letter" })
      }
      expect(yield* stateOf(channelId)).toBe("closed")
      status = 200

      const one = (yield* deliveryOf(first))!
      yield* api("POST", `/deliveries/${one.id}/retry`)
      yield* eventually(deliveryOf(first), (d) => d?.status === "sent", { within: SOON, what: "replayed delivery sent" })
      expect((yield* deliveryOf(second))!.status).toBe("failed")

      expect((yield* api("POST", `/channels/${channelId}/deliveries/retry`)).data).toEqual({ retried: 1 })
      yield* eventually(deliveryOf(second), (d) => d?.status === "sent", { within: SOON, what: "channel replay sent" })
      expect(hook.received.length).toBe(4)
    }))

  it.scoped("a channel made active again sends what waited for it", () =>
    Effect.gen(function*() {
      const { api, append, channelId, hook, key } = yield* setUp(() => ({ status: 200 }))
      const setStatus = (status: string) =>
        Effect.tap(manage(key, "PATCH", `/channels/${channelId}`, { channel: { status } }), (reply) => expect(reply.status).toBe(200))
      yield* api("POST", `/channels/${channelId}/pause`)
      const activityId = yield* append("waits for the channel")
      yield* setStatus("inactive")
      // Resumed while inactive: the loop wakes, finds the channel inactive, and stops.
      yield* api("POST", `/channels/${channelId}/resume`)
      yield* Effect.sleep("1 second")
      expect(hook.received.length).toBe(0)
      yield* setStatus("active")
      yield* eventually(deliveryOf(activityId), (d) => d?.status === "sent", { within: SOON, what: "sent once active" })
      expect(hook.received.length).toBe(1)
    }))
})
