import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { chat, claimsOf, generateToken, tenantWithChannel } from "./support/ClientApi.js"
import { expectError } from "./support/Envelope.js"
import { insertChannel, tenantApi } from "./support/Fixtures.js"
import { rawRequest } from "./support/RawHttp.js"
import { query } from "./support/TestDatabase.js"
import { TestNode, TestNodeLive } from "./support/TestNode.js"

const SIGNING_KEY = "client-conversations-test-key-0123456789ab"

/** A new conversation of the channel through the client API, with a token of `body` for the secret. */
const startConversation = (secret: string, tokenBody: unknown = { user: { id: "alice" } }, body?: unknown) =>
  Effect.gen(function*() {
    const token = yield* generateToken(secret, tokenBody)
    const reply = yield* chat("POST", "/conversations", { bearer: token, ...(body === undefined ? {} : { body }) })
    if (reply.status !== 201) throw new Error(`create failed: ${reply.status} ${JSON.stringify(reply.body)}`)
    return { parent: token, id: reply.body.conversationId as string, token: reply.body.token as string, reply }
  })

const conversationCount = (channelId: string) =>
  Effect.map(query<{ n: string }>("SELECT count(*) AS n FROM conversations WHERE channel_id = $1", [channelId]), (rows) => Number(rows[0]!.n))

layer(TestNodeLive({ TOKEN_SIGNING_KEY: SIGNING_KEY, TRUSTED_PROXIES: "127.0.0.1/32" }), { excludeTestServices: true })(
  "client API conversations",
  (it) => {
    describe("POST /conversations", () => {
      it.effect("201: a token bound to the new conversation, the streamUrl on the request's host, the user as participant, the title in metadata", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const { baseUrl } = yield* TestNode
          const { id, parent, reply, token } = yield* startConversation(channel.secret, { user: { id: "alice" }, permissions: ["read", "write"] }, { title: "Order 42", other: 1 })
          expect(reply.body).toEqual({ conversationId: id, token: expect.any(String), expires_in: expect.any(Number), streamUrl: expect.any(String) })
          const claims = claimsOf(token)
          expect(claims).toMatchObject({ conversation_id: id, user_id: "alice", fam: claimsOf(parent)["fam"], perms: ["read", "write"] })
          expect(claims["exp"]).toBeLessThanOrEqual(claimsOf(parent)["exp"] as number)
          const host = baseUrl.replace("http://", "")
          expect(reply.body.streamUrl).toBe(`ws://${host}/socket/chat/websocket?token=${token}&conversation_id=${id}`)
          const stored = yield* tenantApi(tenant.api_key, "GET", `/conversations/${id}`)
          expect(stored.body.data).toMatchObject({
            channel_id: channel.id,
            status: "active",
            metadata: { source: "client_api", title: "Order 42" },
            participant: { external_id: "alice" }
          })
        }))

      it.effect("wss behind a trusted proxy that says HTTPS; the Host as the request names it", () =>
        Effect.gen(function*() {
          const { channel } = yield* tenantWithChannel
          const token = yield* generateToken(channel.secret)
          const { baseUrl } = yield* TestNode
          // node:http, not fetch: fetch sets Host itself.
          const reply = yield* rawRequest(baseUrl, {
            method: "POST",
            path: "/api/v1/chat/conversations",
            headers: { authorization: `Bearer ${token}`, "x-forwarded-proto": "https", host: "chat.example.com:8443" }
          })
          expect(reply.status).toBe(201)
          expect(JSON.parse(reply.text).streamUrl).toMatch(/^wss:\/\/chat\.example\.com:8443\/socket\/chat\/websocket\?token=/)
        }))

      it.effect("400 for a title too long (bytes, not characters) or not a string; nothing stored", () =>
        Effect.gen(function*() {
          const { channel } = yield* tenantWithChannel
          const token = yield* generateToken(channel.secret)
          for (const title of ["é".repeat(101), 42, null]) {
            expectError(yield* chat("POST", "/conversations", { bearer: token, body: { title } }), 400, "bad_request")
          }
          expect(yield* conversationCount(channel.id)).toBe(0)
          const exact = yield* chat("POST", "/conversations", { bearer: token, body: { title: "é".repeat(100) } })
          expect(exact.status).toBe(201)
        }))

      it.effect("403 insufficient_permission without write; 403 forbidden for a conversation-bound token; nothing stored", () =>
        Effect.gen(function*() {
          const { channel } = yield* tenantWithChannel
          const readOnly = yield* generateToken(channel.secret, { permissions: ["read"] })
          expectError(yield* chat("POST", "/conversations", { bearer: readOnly }), 403, "insufficient_permission", { required: ["write"] })
          const { token } = yield* startConversation(channel.secret)
          expectError(yield* chat("POST", "/conversations", { bearer: token }), 403, "forbidden")
          expect(yield* conversationCount(channel.id)).toBe(1)
        }))
    })

    describe("GET /conversations/:id", () => {
      it.effect("reconnect: a new bound token; the watermark carried into streamUrl as sent; closed conversations too", () =>
        Effect.gen(function*() {
          const { channel } = yield* tenantWithChannel
          const { id, parent, token } = yield* startConversation(channel.secret)
          expect((yield* chat("POST", `/conversations/${id}/close`, { bearer: token })).status).toBe(200)
          for (const bearer of [parent, token]) {
            const reply = yield* chat("GET", `/conversations/${id}?watermark=c2VxOjE%3D`, { bearer })
            expect(reply.status).toBe(200)
            expect(claimsOf(reply.body.token)).toMatchObject({ conversation_id: id, user_id: "alice" })
            const url = new URL(reply.body.streamUrl)
            expect(url.searchParams.get("watermark")).toBe("c2VxOjE=")
            expect(url.searchParams.get("token")).toBe(reply.body.token)
            expect(url.searchParams.get("conversation_id")).toBe(id)
          }
          const plain = yield* chat("GET", `/conversations/${id}`, { bearer: token })
          expect(new URL(plain.body.streamUrl).searchParams.has("watermark")).toBe(false)
        }))

      it.effect("403 forbidden for a token bound to another conversation; 404 for another channel's or an unknown one", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const other = yield* insertChannel(tenant.id)
          const mine = yield* startConversation(channel.secret)
          const theirs = yield* startConversation(other.secret, { user: { id: "bob" } })
          expectError(yield* chat("GET", `/conversations/${theirs.id}`, { bearer: mine.token }), 403, "forbidden")
          const notFound = yield* chat("GET", `/conversations/${theirs.id}`, { bearer: mine.parent })
          expectError(notFound, 404, "not_found")
          expect(JSON.stringify(notFound.body)).not.toContain("bob")
          expectError(yield* chat("GET", `/conversations/${crypto.randomUUID()}`, { bearer: mine.parent }), 404, "not_found")
          expectError(yield* chat("GET", `/conversations/not-a-uuid`, { bearer: mine.parent }), 400, "bad_request")
        }))
    })

    describe("POST /conversations/:id/close and /reopen", () => {
      it.effect("close and reopen answer the status; each real change appends one conversationUpdate, a repeat none", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const { id, token } = yield* startConversation(channel.secret)
          const close = yield* chat("POST", `/conversations/${id}/close`, { bearer: token })
          expect(close).toMatchObject({ status: 200, body: { conversationId: id, status: "closed" } })
          expect((yield* chat("POST", `/conversations/${id}/close`, { bearer: token })).body).toEqual({ conversationId: id, status: "closed" })
          const reopen = yield* chat("POST", `/conversations/${id}/reopen`, { bearer: token })
          expect(reopen).toMatchObject({ status: 200, body: { conversationId: id, status: "active" } })
          expect((yield* chat("POST", `/conversations/${id}/reopen`, { bearer: token })).body).toEqual({ conversationId: id, status: "active" })
          const activities = yield* tenantApi(tenant.api_key, "GET", `/conversations/${id}/activities`)
          expect(activities.body.data.map((a: any) => [a.type, a.sender, a.metadata.event])).toEqual([
            ["conversationUpdate", "system", "conversation_closed"],
            ["conversationUpdate", "system", "conversation_reopened"]
          ])
        }))

      it.effect("403 without write or on another conversation; 404 for another channel's; nothing changes", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const other = yield* insertChannel(tenant.id)
          const mine = yield* startConversation(channel.secret)
          const theirs = yield* startConversation(other.secret)
          const readOnly = yield* generateToken(channel.secret, { permissions: ["read"] })
          expectError(yield* chat("POST", `/conversations/${mine.id}/close`, { bearer: readOnly }), 403, "insufficient_permission", { required: ["write"] })
          expectError(yield* chat("POST", `/conversations/${theirs.id}/close`, { bearer: mine.token }), 403, "forbidden")
          expectError(yield* chat("POST", `/conversations/${theirs.id}/reopen`, { bearer: mine.parent }), 404, "not_found")
          expectError(yield* chat("POST", `/conversations/${theirs.id}/close`, { bearer: mine.parent }), 404, "not_found")
          const statuses = yield* query<{ status: string }>("SELECT status FROM conversations WHERE id = ANY($1::uuid[])", [[mine.id, theirs.id]])
          expect(statuses.map((r) => r.status)).toEqual(["active", "active"])
        }))
    })
  }
)
