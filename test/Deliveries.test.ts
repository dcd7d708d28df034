import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expectError } from "./support/Envelope.js"
import { insertDelivery, scopedKey, storedDelivery } from "./support/DeliveryFixtures.js"
import { insertChannel, insertConversation, tenantApi } from "./support/Fixtures.js"
import { ISO_MICROS } from "./support/ManageClient.js"
import { query, serverUrl } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

/** A tenant with one channel and one conversation. */
const setup = Effect.gen(function*() {
  const tenant = yield* createTenant()
  const channel = yield* insertChannel(tenant.id)
  const conversationId = yield* insertConversation(tenant.id, channel.id)
  return { tenant, key: tenant.api_key, ids: { tenantId: tenant.id, channelId: channel.id, conversationId } }
})

/**
 * Pauses the channel where a test reads the rows a replay wrote: the replay wakes the channel's loop,
 * which would attempt them at once (test/DeliveryWakes.test.ts has the sending).
 */
const parkLoop = (channelId: string) => query(`UPDATE channels SET circuit_state = 'paused' WHERE id = $1`, [channelId])

/** An instant `second` seconds into 2026, for rows of a known order. */
const at = (second: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, second)).toISOString()

layer(TestNodeLive(), { excludeTestServices: true })("delivery routes", (it) => {
  const sqlIt = it.effect.runIf(serverUrl !== undefined)

  describe("GET /deliveries", () => {
    sqlIt("shows the spec's fields, the stored redacted payload, newest first, only the key's tenant", () =>
      Effect.gen(function*() {
        const { key, ids } = yield* setup
        const other = yield* setup
        const older = yield* insertDelivery(ids, { insertedAt: at(1), payload: { text: "a", metadata: { api_key: "[REDACTED]" } } })
        const newer = yield* insertDelivery(ids, { insertedAt: at(2), status: "failed", attempts: 3, lastError: "HTTP 500" })
        yield* insertDelivery(other.ids, { insertedAt: at(3) })
        const reply = yield* tenantApi(key, "GET", "/deliveries")
        expect(reply.status).toBe(200)
        expect(reply.body.meta).toEqual({ next_cursor: null, has_more: false, limit: 50 })
        expect(reply.body.data.map((d: any) => d.id)).toEqual([newer, older])
        expect(reply.body.data[0]).toEqual({
          id: newer,
          activity_id: expect.any(String),
          channel_id: ids.channelId,
          status: "failed",
          attempts: 3,
          last_error: "HTTP 500",
          provider_message_id: null,
          sent_at: null,
          delivered_at: null,
          read_at: null,
          retry_count: 0,
          retried_by: null,
          retried_at: null,
          payload: expect.any(Object),
          inserted_at: "2026-01-01T00:00:02.000000Z",
          updated_at: expect.stringMatching(ISO_MICROS)
        })
        expect(reply.body.data[1].payload).toEqual({ text: "a", metadata: { api_key: "[REDACTED]" } })
      }))

    sqlIt("filters by status, channel_id, activity_id and conversation_id", () =>
      Effect.gen(function*() {
        const { key, tenant, ids } = yield* setup
        const channel2 = yield* insertChannel(tenant.id)
        const conversation2 = yield* insertConversation(tenant.id, channel2.id)
        const activityId = crypto.randomUUID()
        const a = yield* insertDelivery(ids, { status: "failed", activityId })
        const b = yield* insertDelivery(ids, { status: "sent" })
        const c = yield* insertDelivery({ ...ids, channelId: channel2.id, conversationId: conversation2 }, { activityId })
        const idsOf = (path: string) =>
          Effect.map(tenantApi(key, "GET", path), (reply) => {
            expect(reply.status, JSON.stringify(reply.body)).toBe(200)
            return reply.body.data.map((d: any) => d.id).sort()
          })
        expect(yield* idsOf("/deliveries?status=failed")).toEqual([a])
        expect(yield* idsOf("/deliveries?status=sent")).toEqual([b])
        expect(yield* idsOf(`/deliveries?channel_id=${channel2.id}`)).toEqual([c])
        expect(yield* idsOf(`/deliveries?activity_id=${activityId}`)).toEqual([a, c].sort())
        expect(yield* idsOf(`/deliveries?conversation_id=${ids.conversationId}`)).toEqual([a, b].sort())
        expect(yield* idsOf(`/deliveries?conversation_id=${conversation2}&activity_id=${activityId}`)).toEqual([c])
        expectError(yield* tenantApi(key, "GET", "/deliveries?status=lost"), 400, "bad_request")
        expectError(yield* tenantApi(key, "GET", "/deliveries?channel_id=nope"), 400, "bad_request")
        expectError(yield* tenantApi(key, "GET", "/deliveries?activity_id=nope"), 400, "bad_request")
        expectError(yield* tenantApi(key, "GET", "/deliveries?conversation_id=nope"), 400, "bad_request")
      }))

    sqlIt("pages by an opaque keyset cursor; a bad cursor or limit is 400; limit is capped at 500", () =>
      Effect.gen(function*() {
        const { key, ids } = yield* setup
        const made: Array<string> = []
        // Two rows share a timestamp: the id breaks the tie.
        for (const second of [1, 2, 2, 3, 4]) made.push(yield* insertDelivery(ids, { insertedAt: at(second) }))
        const seen: Array<string> = []
        let cursor: string | null = null
        let pages = 0
        do {
          const path: string = `/deliveries?limit=2${cursor === null ? "" : `&cursor=${cursor}`}`
          const reply = yield* tenantApi(key, "GET", path)
          expect(reply.status).toBe(200)
          expect(reply.body.meta.limit).toBe(2)
          seen.push(...reply.body.data.map((d: any) => d.id))
          cursor = reply.body.meta.next_cursor
          expect(reply.body.meta.has_more).toBe(cursor !== null)
          pages++
        } while (cursor !== null)
        expect(pages).toBe(3)
        expect(seen).toHaveLength(5)
        expect(new Set(seen)).toEqual(new Set(made))
        expect(seen[0]).toBe(made[4])
        expect(seen[4]).toBe(made[0])
        expectError(yield* tenantApi(key, "GET", "/deliveries?cursor=garbage"), 400, "bad_request")
        expectError(yield* tenantApi(key, "GET", "/deliveries?limit=0"), 400, "bad_request")
        expect((yield* tenantApi(key, "GET", "/deliveries?limit=100000")).body.meta.limit).toBe(500)
      }))

    sqlIt("needs read; a channel token is refused", () =>
      Effect.gen(function*() {
        const { key, tenant } = yield* setup
        const channel = yield* insertChannel(tenant.id)
        const writeOnly = yield* scopedKey(key, ["write"])
        expectError(yield* tenantApi(writeOnly, "GET", "/deliveries"), 403, "insufficient_scope", { required: ["read"] })
        const reply = yield* tenantApi("", "GET", "/deliveries", undefined, { "x-channel-token": channel.secret })
        expect(reply.status).toBe(403)
      }))
  })

  describe("POST /deliveries/:id/retry", () => {
    sqlIt("replays a dead letter: pending, due now, attempts reset, retry fields set", () =>
      Effect.gen(function*() {
        const { key, tenant, ids } = yield* setup
        yield* parkLoop(ids.channelId)
        const id = yield* insertDelivery(ids, { status: "failed", attempts: 8, lastError: "HTTP 500" })
        const reply = yield* tenantApi(key, "POST", `/deliveries/${id}/retry`)
        expect(reply.status, JSON.stringify(reply.body)).toBe(200)
        expect(reply.body.data).toMatchObject({
          id,
          status: "pending",
          attempts: 0,
          retry_count: 1,
          retried_by: `tenant_api:${tenant.id}`,
          retried_at: expect.stringMatching(ISO_MICROS),
          last_error: "HTTP 500"
        })
        const row = yield* storedDelivery(id)
        expect(row.next_attempt_at).not.toBeNull()
        const [{ due }] = yield* query<{ due: boolean }>("SELECT next_attempt_at <= now() AS due FROM deliveries WHERE id = $1", [id])
        expect(due).toBe(true)
        // Failed again, replayed again by a scoped key: counted, and the key is the actor.
        yield* query("UPDATE deliveries SET status = 'failed' WHERE id = $1", [id])
        const writer = yield* scopedKey(key, ["write"])
        const again = yield* tenantApi(writer, "POST", `/deliveries/${id}/retry`)
        expect(again.body.data.retry_count).toBe(2)
        const [{ id: keyId }] = yield* query<{ id: string }>(
          "SELECT id FROM api_keys WHERE tenant_id = $1 AND kind = 'scoped' ORDER BY inserted_at DESC LIMIT 1",
          [tenant.id]
        )
        expect(again.body.data.retried_by).toBe(`tenant_api:${keyId}`)
      }))

    sqlIt("a delivery that is not failed is 409 not_failed and unchanged; unknown or foreign is 404", () =>
      Effect.gen(function*() {
        const { key, ids } = yield* setup
        const other = yield* setup
        for (const status of ["pending", "sent", "delivered", "read"]) {
          const id = yield* insertDelivery(ids, { status })
          expectError(yield* tenantApi(key, "POST", `/deliveries/${id}/retry`), 409, "not_failed")
          expect((yield* storedDelivery(id)).retry_count).toBe(0)
        }
        const foreign = yield* insertDelivery(other.ids, { status: "failed" })
        expectError(yield* tenantApi(key, "POST", `/deliveries/${foreign}/retry`), 404, "not_found")
        expect((yield* storedDelivery(foreign)).status).toBe("failed")
        expectError(yield* tenantApi(key, "POST", `/deliveries/${crypto.randomUUID()}/retry`), 404, "not_found")
        expectError(yield* tenantApi(key, "POST", "/deliveries/nope/retry"), 400, "bad_request")
      }))

    sqlIt("needs write", () =>
      Effect.gen(function*() {
        const { key, ids } = yield* setup
        const id = yield* insertDelivery(ids, { status: "failed" })
        const reader = yield* scopedKey(key, ["read", "manage"])
        expectError(yield* tenantApi(reader, "POST", `/deliveries/${id}/retry`), 403, "insufficient_scope", { required: ["write"] })
        expect((yield* storedDelivery(id)).status).toBe("failed")
      }))
  })

  describe("POST /channels/:id/deliveries/retry", () => {
    sqlIt("replays every dead letter of the channel and only those", () =>
      Effect.gen(function*() {
        const { key, tenant, ids } = yield* setup
        yield* parkLoop(ids.channelId)
        const channel2 = yield* insertChannel(tenant.id)
        const conversation2 = yield* insertConversation(tenant.id, channel2.id)
        const failed: Array<string> = []
        for (let i = 0; i < 7; i++) failed.push(yield* insertDelivery(ids, { status: "failed" }))
        const sent = yield* insertDelivery(ids, { status: "sent" })
        const elsewhere = yield* insertDelivery({ ...ids, channelId: channel2.id, conversationId: conversation2 }, { status: "failed" })
        const reply = yield* tenantApi(key, "POST", `/channels/${ids.channelId}/deliveries/retry`)
        expect(reply.status, JSON.stringify(reply.body)).toBe(200)
        expect(reply.body).toEqual({ data: { retried: 7 } })
        for (const id of failed) {
          expect(yield* storedDelivery(id)).toMatchObject({ status: "pending", retry_count: 1, retried_by: `tenant_api:${tenant.id}` })
        }
        expect((yield* storedDelivery(sent)).status).toBe("sent")
        expect((yield* storedDelivery(elsewhere)).status).toBe("failed")
        expect((yield* tenantApi(key, "POST", `/channels/${ids.channelId}/deliveries/retry`)).body).toEqual({ data: { retried: 0 } })
      }))

    sqlIt("a foreign or unknown channel is 404 and nothing moves", () =>
      Effect.gen(function*() {
        const { key } = yield* setup
        const other = yield* setup
        const id = yield* insertDelivery(other.ids, { status: "failed" })
        expectError(yield* tenantApi(key, "POST", `/channels/${other.ids.channelId}/deliveries/retry`), 404, "not_found")
        expectError(yield* tenantApi(key, "POST", `/channels/${crypto.randomUUID()}/deliveries/retry`), 404, "not_found")
        expect((yield* storedDelivery(id)).status).toBe("failed")
      }))
  })

  describe("channel delivery state, pause and resume", () => {
    sqlIt("GET /channels/:id/delivery counts pending and failed, shows breaker and rate limit", () =>
      Effect.gen(function*() {
        const { key, ids } = yield* setup
        yield* query(`UPDATE channels SET rate_limit = '{"limit": 5, "window_ms": 1000}' WHERE id = $1`, [ids.channelId])
        for (const status of ["pending", "pending", "failed", "sent", "delivered", "pending"]) yield* insertDelivery(ids, { status })
        const reply = yield* tenantApi(key, "GET", `/channels/${ids.channelId}/delivery`)
        expect(reply.status, JSON.stringify(reply.body)).toBe(200)
        expect(reply.body).toEqual({
          data: {
            channel_id: ids.channelId,
            circuit_state: "closed",
            paused: false,
            pending: 3,
            failed: 1,
            rate_limit: { limit: 5, window_ms: 1000 }
          }
        })
        yield* query("UPDATE channels SET circuit_state = 'open' WHERE id = $1", [ids.channelId])
        expect((yield* tenantApi(key, "GET", `/channels/${ids.channelId}/delivery`)).body.data).toMatchObject({
          circuit_state: "open",
          paused: false
        })
      }))

    sqlIt("pause sets paused, resume closes (an open breaker too); stored, audited, visible in the summary", () =>
      Effect.gen(function*() {
        const { key, tenant, ids } = yield* setup
        const paused = yield* tenantApi(key, "POST", `/channels/${ids.channelId}/pause`)
        expect(paused.status, JSON.stringify(paused.body)).toBe(200)
        expect(paused.body).toEqual({ data: { channel_id: ids.channelId, circuit_state: "paused" } })
        const stored = () =>
          Effect.map(query<{ circuit_state: string }>("SELECT circuit_state FROM channels WHERE id = $1", [ids.channelId]), (r) => r[0]!.circuit_state)
        expect(yield* stored()).toBe("paused")
        expect((yield* tenantApi(key, "GET", `/channels/${ids.channelId}/delivery`)).body.data).toMatchObject({
          circuit_state: "paused",
          paused: true
        })
        const resumed = yield* tenantApi(key, "POST", `/channels/${ids.channelId}/resume`)
        expect(resumed.body).toEqual({ data: { channel_id: ids.channelId, circuit_state: "closed" } })
        expect(yield* stored()).toBe("closed")
        yield* query("UPDATE channels SET circuit_state = 'open' WHERE id = $1", [ids.channelId])
        yield* tenantApi(key, "POST", `/channels/${ids.channelId}/resume`)
        expect(yield* stored()).toBe("closed")
        const audit = yield* query<{ action: string; actor_id: string }>(
          "SELECT action, actor_id FROM audit_log WHERE resource_id = $1 ORDER BY inserted_at, action",
          [ids.channelId]
        )
        expect(audit.map((a) => a.action).sort()).toEqual(["channel.paused", "channel.resumed", "channel.resumed"])
        expect(audit.every((a) => a.actor_id === tenant.id)).toBe(true)
      }))

    sqlIt("pause and resume need manage; a channel token works for its own channel only; foreign is 404", () =>
      Effect.gen(function*() {
        const { key, tenant, ids } = yield* setup
        const other = yield* setup
        const writer = yield* scopedKey(key, ["read", "write"])
        expectError(yield* tenantApi(writer, "POST", `/channels/${ids.channelId}/pause`), 403, "insufficient_scope", { required: ["manage"] })
        expectError(yield* tenantApi(key, "POST", `/channels/${other.ids.channelId}/pause`), 404, "not_found")
        expectError(yield* tenantApi(key, "GET", `/channels/${other.ids.channelId}/delivery`), 404, "not_found")
        expectError(yield* tenantApi(key, "POST", `/channels/${crypto.randomUUID()}/resume`), 404, "not_found")
        const [{ circuit_state }] = yield* query<{ circuit_state: string }>("SELECT circuit_state FROM channels WHERE id = $1", [other.ids.channelId])
        expect(circuit_state).toBe("closed")
        const own = yield* insertChannel(tenant.id)
        const token = { "x-channel-token": own.secret }
        expectError(yield* tenantApi("", "POST", `/channels/${ids.channelId}/pause`, undefined, token), 404, "not_found")
        const reply = yield* tenantApi("", "POST", `/channels/${own.id}/pause`, undefined, token)
        expect(reply.status, JSON.stringify(reply.body)).toBe(200)
      }))
  })
})
