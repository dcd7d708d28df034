import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { envelope } from "./support/Envelope.js"
import { insertChannel, insertConversation, storedState, storedTexts, tenantApi } from "./support/Fixtures.js"
import { query } from "./support/TestDatabase.js"
import { admin, createTenant, manage, TestNodeLive } from "./support/TestNode.js"

/**
 * Appends through the lean route take a key this node looked up in the last 65 s without
 * looking it up again; their write checks the key where it commits (ADR 0015). Whatever a key
 * went through meanwhile, its next append answers as after a lookup: 401, nothing stored.
 */

/** A tenant, a conversation and a scoped write key already used for one append (so remembered). */
const usedWriteKey = (fields: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const tenant = yield* createTenant()
    const channel = yield* insertChannel(tenant.id)
    const conversationId = yield* insertConversation(tenant.id, channel.id)
    const issued = yield* manage(tenant.api_key, "POST", "/api_keys", { api_key: { name: "writer", scopes: ["write"], ...fields } })
    expect(issued.status).toBe(201)
    const key = issued.body.data as { id: string; key: string }
    const path = `/conversations/${conversationId}/activities`
    const first = yield* tenantApi(key.key, "POST", path, { text: "first" }, { "x-idempotency-key": "first" })
    expect(first.status).toBe(201)
    return { tenant, conversationId, key, path, first: first.body.data as { id: string } }
  })

/** Every answer of a key that is no longer valid: a new append, a repeat of a stored one, bad bodies. */
const refusedEverywhere = (key: string, conversationId: string, path: string) =>
  Effect.gen(function*() {
    const before = yield* storedState(conversationId)
    const attempts = [
      { body: { text: "after" } },
      // The repeat of a stored append would answer the stored activity: not to this key.
      { body: { text: "first" }, headers: { "x-idempotency-key": "first" } },
      // Refusals of the body come after the key, as with a lookup first.
      { body: { text: 42 } },
      { body: { type: "deliveryReceipt" } }
    ]
    for (const attempt of attempts) {
      const reply = yield* tenantApi(key, "POST", path, attempt.body, attempt.headers)
      expect(reply.status, JSON.stringify(attempt)).toBe(401)
      expect(reply.body).toEqual(envelope("unauthorized"))
    }
    expect(yield* storedState(conversationId)).toEqual(before)
  })

layer(TestNodeLive(), { excludeTestServices: true })("recently looked-up keys", (it) => {
  it.effect("a remembered key appends without a lookup: its append is stored while lookups fail", () =>
    Effect.gen(function*() {
      const { conversationId, key, path, tenant } = yield* usedWriteKey()
      const other = yield* manage(tenant.api_key, "POST", "/api_keys", { api_key: { name: "unused", scopes: ["write"] } })
      // The lookup reads `scopes`, the write's check does not: without the column, lookups fail
      // (a statement the schema refuses: 500, ADR 0018).
      const appended = yield* Effect.gen(function*() {
        yield* query("ALTER TABLE api_keys RENAME COLUMN scopes TO scopes_hidden")
        const unknown = yield* tenantApi(other.body.data.key, "POST", path, { text: "looked up" })
        expect(unknown.status).toBe(500)
        return yield* tenantApi(key.key, "POST", path, { text: "remembered" })
      }).pipe(Effect.ensuring(query("ALTER TABLE api_keys RENAME COLUMN scopes_hidden TO scopes").pipe(Effect.orDie)))
      expect(appended.status).toBe(201)
      expect(yield* storedTexts(conversationId)).toEqual([[1, "first"], [2, "remembered"]])
    }))

  it.effect("a revoked key appends nothing more, repeats nothing and gets 401 before any check of its body", () =>
    Effect.gen(function*() {
      const { conversationId, key, path, tenant } = yield* usedWriteKey()
      expect((yield* manage(tenant.api_key, "DELETE", `/api_keys/${key.id}`)).status).toBe(204)
      yield* refusedEverywhere(key.key, conversationId, path)
    }))

  it.effect("the key of a tenant made inactive appends nothing", () =>
    Effect.gen(function*() {
      const { conversationId, key, path, tenant } = yield* usedWriteKey()
      expect((yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { status: "inactive" } })).status).toBe(200)
      const before = yield* storedState(conversationId)
      const reply = yield* tenantApi(key.key, "POST", path, { text: "after" })
      expect(reply.status).toBe(401)
      expect(reply.body).toEqual(envelope("unauthorized"))
      expect(yield* storedState(conversationId)).toEqual(before)
    }))

  it.effect("the remembered key of a deleted tenant gets 401, not the 404 of its conversation gone with it", () =>
    Effect.gen(function*() {
      const { key, path, tenant } = yield* usedWriteKey()
      expect((yield* admin("DELETE", `/tenants/${tenant.id}`)).status).toBe(204)
      const reply = yield* tenantApi(key.key, "POST", path, { text: "after" })
      expect(reply.status).toBe(401)
      expect(reply.body).toEqual(envelope("unauthorized"))
    }))

  it.effect("a key that expires while remembered appends nothing after its expiry", () =>
    Effect.gen(function*() {
      const expiresAt = Date.now() + 1_500
      const { conversationId, key, path } = yield* usedWriteKey({ expires_at: new Date(expiresAt).toISOString() })
      yield* Effect.sleep(Math.max(0, expiresAt - Date.now()) + 100)
      yield* refusedEverywhere(key.key, conversationId, path)
    }))

  it.effect("a valid remembered key repeating a stored append gets the stored activity", () =>
    Effect.gen(function*() {
      const { conversationId, first, key, path } = yield* usedWriteKey()
      const before = yield* storedState(conversationId)
      const again = yield* tenantApi(key.key, "POST", path, { text: "first" }, { "x-idempotency-key": "first" })
      expect(again.status).toBe(201)
      expect(again.body.data.id).toBe(first.id)
      expect(yield* storedState(conversationId)).toEqual(before)
    }))
})
