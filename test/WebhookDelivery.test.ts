import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"
import { eventually } from "./support/Eventually.js"
import { insertConversation, tenantApi } from "./support/Fixtures.js"
import { createChannel, manage } from "./support/ManageClient.js"
import { query } from "./support/TestDatabase.js"
import { createTenant, request, TestNodeLive } from "./support/TestNode.js"
import { webhookReceiver } from "./support/WebhookReceiver.js"

/** Each delivery id's first request is answered 500 and later ones 200, as a receiver that fails once. */
const receiver = webhookReceiver((request, earlier) =>
  earlier === 0 ? { status: 500 } : { status: 200, body: { message_id: `receiver-${String(request.headers["x-chat-delivery-id"])}` } }
)

/** server-apis.md "Outbound webhook channel deliveries": the receiver's check of `x-chat-signature`. */
const signatureValid = (header: string, body: Buffer, secret: string) => {
  const parts = new Map(header.split(",").map((part) => part.trim().split("=", 2) as [string, string]))
  const t = parts.get("t")
  const v1 = parts.get("v1")
  if (t === undefined || v1 === undefined || Math.abs(Date.now() / 1000 - Number(t)) > 300) return false
  const expected = createHmac("sha256", secret).update(`${t}.`).update(body).digest()
  const sent = Buffer.from(v1, "hex")
  return sent.length === expected.length && timingSafeEqual(sent, expected)
}

/** A tenant with a webhook channel to the receiver (retried every 100 ms) and a conversation on it. */
const hookedChannel = Effect.gen(function*() {
  const hook = yield* receiver
  const tenant = yield* createTenant()
  const channel = yield* createChannel(tenant.api_key, {
    config: { url: hook.url },
    retry_policy: { max_attempts: 5, backoff: "fixed", base_ms: 100, max_ms: 100, timeout_ms: 5000 }
  })
  const conversationId = yield* insertConversation(tenant.id, channel.id)
  return { channel, conversationId, hook, tenant }
})

layer(TestNodeLive({ DELIVERY_SWEEP_MS: "500" }), { excludeTestServices: true })("webhook delivery end to end", (it) => {
  it.scoped("an append reaches the channel's webhook signed; a 500 is retried with the same delivery id, then recorded sent", () =>
    Effect.gen(function*() {
      const { channel, conversationId, hook, tenant } = yield* hookedChannel
      const reply = yield* tenantApi(tenant.api_key, "POST", `/conversations/${conversationId}/activities`, { text: "to the hook" })
      expect(reply.status).toBe(201)
      const activityId = reply.body.data.id as string

      yield* eventually(Effect.sync(() => hook.received.length), (n) => n >= 2, { within: "30 seconds" })
      const [first, second] = hook.received
      const delivery = (yield* query<{ id: string }>(`SELECT id FROM deliveries WHERE activity_id = $1`, [activityId]))[0]!
      for (const request of [first!, second!]) {
        expect(request.headers["x-chat-event"]).toBe("activity.created")
        expect(request.headers["x-chat-delivery-id"]).toBe(delivery.id)
        expect(request.headers["content-type"]).toBe("application/json")
        expect(signatureValid(String(request.headers["x-chat-signature"]), request.body, channel.secret)).toBe(true)
        expect(signatureValid(String(request.headers["x-chat-signature"]), request.body, `${channel.secret}x`)).toBe(false)
        expect(JSON.parse(request.body.toString("utf8"))).toMatchObject({ id: activityId, text: "to the hook" })
      }
      const stored = yield* eventually(
        query<{ status: string; attempts: number; provider_message_id: string | null }>(
          `SELECT status, attempts, provider_message_id FROM deliveries WHERE id = $1`,
          [delivery.id]
        ),
        (rows) => rows[0]?.status === "sent",
        { within: "30 seconds" }
      )
      expect(stored[0]).toEqual({ status: "sent", attempts: 2, provider_message_id: `receiver-${delivery.id}` })

      // The node's delivery series: one retried attempt, one sent, its latency, the channel's breaker closed.
      const metrics = String((yield* request("GET", "/metrics")).body)
      expect(metrics).toMatch(/parley_delivery_attempts_total\{channel_type="webhook",outcome="retry"\} [1-9]/)
      expect(metrics).toMatch(/parley_delivery_attempts_total\{channel_type="webhook",outcome="sent"\} [1-9]/)
      expect(metrics).toMatch(/parley_delivery_latency_seconds_count\{channel_type="webhook"\} [1-9]/)
      expect(metrics).toContain(`parley_delivery_breaker_state{channel_id="${channel.id}"} 0`)
    }), { timeout: 90_000 })

  it.scoped("after a rotation the channel's next delivery is signed with the new secret", () =>
    Effect.gen(function*() {
      const { channel, conversationId, hook, tenant } = yield* hookedChannel
      const deliver = (text: string) =>
        Effect.gen(function*() {
          const reply = yield* tenantApi(tenant.api_key, "POST", `/conversations/${conversationId}/activities`, { text })
          expect(reply.status).toBe(201)
          const [delivery] = yield* query<{ id: string }>(`SELECT id FROM deliveries WHERE activity_id = $1`, [reply.body.data.id])
          // The receiver answers 500 then 200: two signed requests, and the second recorded.
          yield* eventually(
            query<{ status: string }>(`SELECT status FROM deliveries WHERE id = $1`, [delivery!.id]),
            (rows) => rows[0]?.status === "sent",
            { within: "30 seconds" }
          )
          return hook.received.filter((request) => request.headers["x-chat-delivery-id"] === delivery!.id)
        })

      // The first delivery starts the channel's entity, whose loop outlives the rotation.
      for (const request of yield* deliver("before")) {
        expect(signatureValid(String(request.headers["x-chat-signature"]), request.body, channel.secret)).toBe(true)
      }
      const rotated = yield* manage(tenant.api_key, "POST", `/channels/${channel.id}/rotate_secret`)
      expect(rotated.status).toBe(200)
      const secret: string = rotated.body.data.secret
      const after = yield* deliver("after")
      expect(after.length).toBe(2)
      for (const request of after) {
        expect(signatureValid(String(request.headers["x-chat-signature"]), request.body, secret)).toBe(true)
        expect(signatureValid(String(request.headers["x-chat-signature"]), request.body, channel.secret)).toBe(false)
      }
    }), { timeout: 90_000 })
})
