import { describe, expect, layer } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { Outbox } from "../src/delivery/Outbox.js"
import { expectError } from "./support/Envelope.js"
import { insertDelivery, scopedKey, storedDelivery } from "./support/DeliveryFixtures.js"
import { insertChannel, insertConversation, tenantApi } from "./support/Fixtures.js"
import { query, serverUrl } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

/** A tenant with an `http_pull` channel and a conversation on it. */
const setup = Effect.gen(function*() {
  const tenant = yield* createTenant()
  const channel = yield* insertChannel(tenant.id, { type: "http_pull" })
  const conversationId = yield* insertConversation(tenant.id, channel.id)
  return { tenant, key: tenant.api_key, secret: channel.secret, ids: { tenantId: tenant.id, channelId: channel.id, conversationId } }
})

/** `n` pending deliveries appended to the outbox in order; their ids. */
const appendMany = (ids: { tenantId: string; channelId: string; conversationId: string }, n: number) =>
  Effect.gen(function*() {
    const outbox = yield* Outbox
    const made: Array<string> = []
    for (let i = 1; i <= n; i++) {
      const id = yield* insertDelivery(ids, { payload: { text: `m${i}`, metadata: { password: "[REDACTED]" } } })
      expect(yield* outbox.appendToOutbox(id)).toEqual({ seq: i })
      made.push(id)
    }
    return made
  })

const outboxLayer = Outbox.Default

layer(TestNodeLive(), { excludeTestServices: true })("http_pull outbox", (it) => {
  const sqlIt = it.effect.runIf(serverUrl !== undefined)
  const withOutbox = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, outboxLayer)

  describe("appendToOutbox", () => {
    sqlIt("gives per-channel seqs from 1, marks the delivery sent, and is idempotent", () =>
      withOutbox(Effect.gen(function*() {
        const { ids } = yield* setup
        const other = yield* setup
        const [first] = yield* appendMany(ids, 2)
        yield* appendMany(other.ids, 1)
        const outbox = yield* Outbox
        expect(yield* outbox.appendToOutbox(first!)).toEqual({ seq: 1 })
        const row = yield* storedDelivery(first!)
        expect(row).toMatchObject({ status: "sent", outbox_seq: "1", attempts: 1, next_attempt_at: null })
        expect(row.sent_at).not.toBeNull()
        const [marks] = yield* query<{ outbox_head: string }>("SELECT outbox_head FROM channels WHERE id = $1", [ids.channelId])
        expect(marks!.outbox_head).toBe("2")
      })))

    sqlIt("concurrent appends to one channel get distinct, gap-free seqs", () =>
      withOutbox(Effect.gen(function*() {
        const { ids } = yield* setup
        const outbox = yield* Outbox
        const made = yield* Effect.all(Array.from({ length: 20 }, () => insertDelivery(ids)))
        const seqs = yield* Effect.all(made.map((id) => outbox.appendToOutbox(id)), { concurrency: "unbounded" })
        expect(seqs.map((s) => s.seq).sort((a, b) => a - b)).toEqual(Array.from({ length: 20 }, (_, i) => i + 1))
      })))

    sqlIt("refuses a delivery that is not pending or not to an http_pull channel", () =>
      withOutbox(Effect.gen(function*() {
        const { tenant, ids } = yield* setup
        const outbox = yield* Outbox
        const failed = yield* insertDelivery(ids, { status: "failed" })
        const hook = yield* insertChannel(tenant.id)
        const conversation = yield* insertConversation(tenant.id, hook.id)
        const toHook = yield* insertDelivery({ ...ids, channelId: hook.id, conversationId: conversation })
        const reasons = yield* Effect.all([failed, toHook, crypto.randomUUID()].map((id) =>
          Effect.map(Effect.exit(outbox.appendToOutbox(id)), (exit) => Exit.isFailure(exit) && exit.cause._tag === "Fail" ? (exit.cause.error as any).reason : "ok")
        ))
        expect(reasons).toEqual(["not_pending", "not_http_pull", "not_found"])
        expect((yield* storedDelivery(failed)).outbox_seq).toBeNull()
      })))
  })

  describe("GET /channels/:id/outbox and POST /outbox/ack", () => {
    sqlIt("pages oldest first with the redacted activity; a sent watermark acknowledges up to it", () =>
      withOutbox(Effect.gen(function*() {
        const { key, ids } = yield* setup
        const made = yield* appendMany(ids, 5)
        const page1 = yield* tenantApi(key, "GET", `/channels/${ids.channelId}/outbox?limit=2`)
        expect(page1.status, JSON.stringify(page1.body)).toBe(200)
        expect(page1.body).toEqual({
          data: [
            { seq: 1, activity: { text: "m1", metadata: { password: "[REDACTED]" } } },
            { seq: 2, activity: { text: "m2", metadata: { password: "[REDACTED]" } } }
          ],
          meta: { watermark: 2, has_more: true, limit: 2 }
        })
        // Polling again without a watermark acknowledges nothing and shows the same page.
        expect((yield* tenantApi(key, "GET", `/channels/${ids.channelId}/outbox?limit=2`)).body.meta.watermark).toBe(2)
        expect((yield* storedDelivery(made[0]!)).status).toBe("sent")
        const page2 = yield* tenantApi(key, "GET", `/channels/${ids.channelId}/outbox?limit=2&watermark=2`)
        expect(page2.body.data.map((e: any) => e.seq)).toEqual([3, 4])
        expect(page2.body.meta).toEqual({ watermark: 4, has_more: true, limit: 2 })
        const statuses = () => Effect.all(made.map((id) => Effect.map(storedDelivery(id), (r) => r.status)))
        expect(yield* statuses()).toEqual(["delivered", "delivered", "sent", "sent", "sent"])
        expect((yield* storedDelivery(made[0]!)).delivered_at).not.toBeNull()
        const page3 = yield* tenantApi(key, "GET", `/channels/${ids.channelId}/outbox?watermark=4`)
        expect(page3.body).toEqual({ data: [{ seq: 5, activity: expect.any(Object) }], meta: { watermark: 5, has_more: false, limit: 100 } })
        const ack = yield* tenantApi(key, "POST", `/channels/${ids.channelId}/outbox/ack`, { watermark: 5 })
        expect(ack.status, JSON.stringify(ack.body)).toBe(200)
        expect(ack.body).toEqual({ data: { acknowledged: 1 } })
        expect(yield* statuses()).toEqual(["delivered", "delivered", "delivered", "delivered", "delivered"])
        // Everything acknowledged: an empty page whose watermark is the acknowledged one.
        expect((yield* tenantApi(key, "GET", `/channels/${ids.channelId}/outbox`)).body).toEqual({
          data: [],
          meta: { watermark: 5, has_more: false, limit: 100 }
        })
        // Acknowledging again, or an older watermark, acknowledges nothing.
        expect((yield* tenantApi(key, "POST", `/channels/${ids.channelId}/outbox/ack`, { watermark: "3" })).body).toEqual({
          data: { acknowledged: 0 }
        })
      })))

    sqlIt("an acknowledgement larger than one chunk acknowledges everything up to it", () =>
      withOutbox(Effect.gen(function*() {
        const { key, ids } = yield* setup
        // 1,203 entries, put in the outbox by SQL as appendToOutbox leaves them (one by one is slow on a loaded host).
        yield* query(
          `INSERT INTO deliveries (id, tenant_id, activity_id, conversation_id, channel_id, payload, status, outbox_seq)
           SELECT gen_random_uuid(), $1, gen_random_uuid(), $2, $3, '{}'::jsonb, 'sent', n FROM generate_series(1, 1203) AS n`,
          [ids.tenantId, ids.conversationId, ids.channelId]
        )
        yield* query("UPDATE channels SET outbox_head = 1203 WHERE id = $1", [ids.channelId])
        const ack = yield* tenantApi(key, "POST", `/channels/${ids.channelId}/outbox/ack`, { watermark: 1202 })
        expect(ack.body).toEqual({ data: { acknowledged: 1202 } })
        const [counts] = yield* query<{ delivered: number; sent: number }>(
          `SELECT count(*) FILTER (WHERE status = 'delivered')::int AS delivered, count(*) FILTER (WHERE status = 'sent')::int AS sent
           FROM deliveries WHERE channel_id = $1`,
          [ids.channelId]
        )
        expect(counts).toEqual({ delivered: 1202, sent: 1 })
        const page = yield* tenantApi(key, "GET", `/channels/${ids.channelId}/outbox`)
        expect(page.body.data.map((e: any) => e.seq)).toEqual([1203])
      })))

    sqlIt("a watermark beyond the head or malformed is 400 invalid_watermark and acknowledges nothing", () =>
      withOutbox(Effect.gen(function*() {
        const { key, ids } = yield* setup
        const made = yield* appendMany(ids, 2)
        expectError(yield* tenantApi(key, "POST", `/channels/${ids.channelId}/outbox/ack`, { watermark: 3 }), 400, "invalid_watermark")
        expectError(yield* tenantApi(key, "GET", `/channels/${ids.channelId}/outbox?watermark=3`), 400, "invalid_watermark")
        for (const bad of [-1, 1.5, "x", "", null, "1e3"]) {
          expectError(yield* tenantApi(key, "POST", `/channels/${ids.channelId}/outbox/ack`, { watermark: bad }), 400, "invalid_watermark", null, String(bad))
        }
        expectError(yield* tenantApi(key, "POST", `/channels/${ids.channelId}/outbox/ack`, {}), 400, "invalid_watermark")
        expectError(yield* tenantApi(key, "GET", `/channels/${ids.channelId}/outbox?watermark=-1`), 400, "invalid_watermark")
        expect((yield* storedDelivery(made[0]!)).status).toBe("sent")
      })))

    sqlIt("other channel types are 422 unsupported_channel_type; foreign channels 404", () =>
      Effect.gen(function*() {
        const { key, tenant } = yield* setup
        const other = yield* setup
        const hook = yield* insertChannel(tenant.id)
        expectError(yield* tenantApi(key, "GET", `/channels/${hook.id}/outbox`), 422, "unsupported_channel_type")
        expectError(yield* tenantApi(key, "POST", `/channels/${hook.id}/outbox/ack`, { watermark: 0 }), 422, "unsupported_channel_type")
        expectError(yield* tenantApi(key, "GET", `/channels/${other.ids.channelId}/outbox`), 404, "not_found")
        expectError(yield* tenantApi(key, "POST", `/channels/${other.ids.channelId}/outbox/ack`, { watermark: 0 }), 404, "not_found")
      }))

    sqlIt("reading needs read, acknowledging (ack, or a watermark on the poll) needs write; the channel token reaches its own outbox", () =>
      withOutbox(Effect.gen(function*() {
        const { key, secret, ids } = yield* setup
        const made = yield* appendMany(ids, 1)
        const reader = yield* scopedKey(key, ["read"])
        const writer = yield* scopedKey(key, ["write"])
        expect((yield* tenantApi(reader, "GET", `/channels/${ids.channelId}/outbox`)).status).toBe(200)
        expectError(yield* tenantApi(reader, "GET", `/channels/${ids.channelId}/outbox?watermark=1`), 403, "insufficient_scope", { required: ["write"] })
        expectError(yield* tenantApi(reader, "POST", `/channels/${ids.channelId}/outbox/ack`, { watermark: 1 }), 403, "insufficient_scope", { required: ["write"] })
        expectError(yield* tenantApi(writer, "GET", `/channels/${ids.channelId}/outbox`), 403, "insufficient_scope", { required: ["read"] })
        expect((yield* storedDelivery(made[0]!)).status).toBe("sent")
        const token = { "x-channel-token": secret }
        const polled = yield* tenantApi("", "GET", `/channels/${ids.channelId}/outbox?watermark=1`, undefined, token)
        expect(polled.status, JSON.stringify(polled.body)).toBe(200)
        expect((yield* storedDelivery(made[0]!)).status).toBe("delivered")
      })))
  })
})
