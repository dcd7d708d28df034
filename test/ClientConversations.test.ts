import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { chat, claimsOf, generateToken, tenantWithChannel } from "./support/ClientApi.js"
import { expectError } from "./support/Envelope.js"
import { insertChannel, storedState, tenantApi } from "./support/Fixtures.js"
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

/** Per tenant and per hour, so that no window ends within a test: tests other than the 429 one post fewer. */
const ACTIVITY_LIMIT = 30

const post = (token: string, id: string, body: unknown, headers: Record<string, string> = {}) =>
  chat("POST", `/conversations/${id}/activities`, { bearer: token, body, headers })

/** The stored activities of a conversation, in order, as the tenant API shows them. */
const storedActivities = (apiKey: string, id: string) =>
  Effect.map(tenantApi(apiKey, "GET", `/conversations/${id}/activities`), (reply) => reply.body.data as Array<any>)

layer(
  TestNodeLive({
    TOKEN_SIGNING_KEY: SIGNING_KEY,
    TRUSTED_PROXIES: "127.0.0.1/32",
    RATE_LIMITS: JSON.stringify({ activity_create: { limit: ACTIVITY_LIMIT, scale_ms: 3_600_000 } })
  }),
  { excludeTestServices: true }
)(
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

    describe("POST /conversations/:id/activities", () => {
      it.effect("200 {id}; the sender is from.id, else the token's user, else user; channelData (or its alias metadata) stored as metadata", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const { id, token } = yield* startConversation(channel.secret)
          const first = yield* post(token, id, { text: "hello", channelData: { a: 1 }, metadata: { ignored: true }, ignored: 1 })
          expect(first).toMatchObject({ status: 200, body: { id: expect.any(String) } })
          expect(Object.keys(first.body)).toEqual(["id"])
          yield* post(token, id, { text: "as bot", from: { id: "bot-7" }, metadata: { b: 2 } })
          const anonymous = yield* generateToken(channel.secret)
          yield* post(anonymous, id, { type: "event", attachments: [{ contentType: "text/plain", name: "a", extra: "dropped" }] })
          const stored = yield* storedActivities(tenant.api_key, id)
          expect(stored.map((a) => [a.id === first.body.id, a.type, a.sender, a.text, a.metadata])).toEqual([
            [true, "message", "alice", "hello", { a: 1 }],
            [false, "message", "bot-7", "as bot", { b: 2 }],
            [false, "event", "user", null, {}]
          ])
          expect(stored[2].attachments).toEqual([{ contentType: "text/plain", name: "a" }])
        }))

      it.effect("x-idempotency-key: a repeat answers the original id and stores nothing", () =>
        Effect.gen(function*() {
          const { channel } = yield* tenantWithChannel
          const { id, token } = yield* startConversation(channel.secret)
          const first = yield* post(token, id, { text: "once" }, { "x-idempotency-key": "k-1" })
          const before = yield* storedState(id)
          const again = yield* post(token, id, { text: "once" }, { "x-idempotency-key": "k-1" })
          expect(again).toMatchObject({ status: 200, body: { id: first.body.id } })
          expect(yield* storedState(id)).toEqual(before)
        }))

      it.effect("typed messages: text filled from the payload; replies, reactions and edits name an activity of this conversation", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const { id, token } = yield* startConversation(channel.secret)
          const typed = yield* post(token, id, { messageType: "buttons", payload: { text: "Pick one", buttons: [{ label: "A", value: "a" }] } })
          expect(typed.status).toBe(200)
          const reaction = yield* post(token, id, { type: "messageReaction", text: "👍", replyToId: typed.body.id })
          expect(reaction.status).toBe(200)
          const stored = yield* storedActivities(tenant.api_key, id)
          expect(stored.map((a) => [a.type, a.text, a.message_type, a.reply_to_id])).toEqual([
            ["message", "Pick one", "buttons", null],
            ["messageReaction", "👍", null, typed.body.id]
          ])
        }))

      it.effect("422 invalid_message for every rule of the body table, details keyed by stored names; nothing stored", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const { id, token } = yield* startConversation(channel.secret)
          const other = yield* startConversation(channel.secret)
          const elsewhere = yield* post(other.token, other.id, { text: "elsewhere" })
          const before = yield* storedState(id)
          const attachment = { contentType: "text/plain" }
          const cases: ReadonlyArray<readonly [unknown, string]> = [
            [{ type: "deliveryReceipt" }, "type"],
            [{ type: "nonsense" }, "type"],
            [{ text: 7 }, "text"],
            [{ text: "é".repeat(32_769) }, "text"],
            [{ type: "messageReaction", text: "x".repeat(65), replyToId: elsewhere.body.id }, "text"],
            [{ attachments: Array.from({ length: 11 }, () => attachment) }, "attachments"],
            [{ attachments: [{ contentType: "text/plain", content: "x".repeat(4_100) }] }, "attachments"],
            [{ attachments: [{ name: "no type" }] }, "attachments"],
            [{ type: "messageDelete" }, "reply_to_id"],
            [{ replyToId: "not-a-uuid" }, "reply_to_id"],
            [{ replyToId: elsewhere.body.id }, "reply_to_id"],
            [{ channelData: { big: "x".repeat(16_400) } }, "metadata"],
            [{ channelData: [1] }, "metadata"],
            [{ messageType: "buttons" }, "payload"],
            [{ messageType: "card", payload: { title: "x".repeat(131_100) } }, "payload"],
            [{ messageType: "buttons", payload: { text: "no buttons" } }, "payload"],
            [{ type: "event", messageType: "image", payload: { url: "https://example.com/a.png" } }, "message_type"],
            [{ from: "someone" }, "sender"],
            [{ from: { id: 5 } }, "sender"]
          ]
          for (const [body, field] of cases) {
            const reply = yield* post(token, id, body)
            expect(reply.status, JSON.stringify(body).slice(0, 80)).toBe(422)
            expect(reply.body.error.code).toBe("invalid_message")
            expect(Object.keys(reply.body.error.details), JSON.stringify(body).slice(0, 80)).toContain(field)
          }
          expect(yield* storedState(id)).toEqual(before)
          expect((yield* storedActivities(tenant.api_key, id)).length).toBe(0)
        }))

      it.effect("403 forbidden on another conversation, 403 without write, 404 for another channel's, 409 when closed; nothing stored", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const other = yield* insertChannel(tenant.id)
          const mine = yield* startConversation(channel.secret)
          const theirs = yield* startConversation(other.secret)
          const readOnly = yield* generateToken(channel.secret, { permissions: ["read", "typing"] })
          const before = [yield* storedState(mine.id), yield* storedState(theirs.id)]
          expectError(yield* post(mine.token, theirs.id, { text: "x" }), 403, "forbidden")
          expectError(yield* post(readOnly, mine.id, { text: "x" }), 403, "insufficient_permission", { required: ["write"] })
          expectError(yield* post(mine.parent, theirs.id, { text: "x" }), 404, "not_found")
          expect([yield* storedState(mine.id), yield* storedState(theirs.id)]).toEqual(before)
          yield* chat("POST", `/conversations/${mine.id}/close`, { bearer: mine.token })
          const closed = yield* storedState(mine.id)
          expectError(yield* post(mine.token, mine.id, { text: "x" }), 409, "conversation_closed")
          expect(yield* storedState(mine.id)).toEqual(closed)
        }))

      it.effect("429 past activity_create, a bucket shared with the tenant API; a stored key still answers its id", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const { id, token } = yield* startConversation(channel.secret)
          const kept = yield* post(token, id, { text: "kept" }, { "x-idempotency-key": "kept" })
          for (let i = 1; i < ACTIVITY_LIMIT; i++) expect((yield* post(token, id, { text: `m${i}` })).status).toBe(200)
          const before = yield* storedState(id)
          const limited = yield* post(token, id, { text: "over" })
          expect(limited.status).toBe(429)
          expect(limited.body.error).toMatchObject({ code: "rate_limited", details: { retry_after_ms: expect.any(Number) } })
          expect((yield* tenantApi(tenant.api_key, "POST", `/conversations/${id}/activities`, { text: "tenant" })).status).toBe(429)
          expect(yield* post(token, id, { text: "kept" }, { "x-idempotency-key": "kept" })).toMatchObject({ status: 200, body: { id: kept.body.id } })
          expect(yield* storedState(id)).toEqual(before)
        }))
    })

    describe("GET /conversations/:id/activities", () => {
      /** A conversation of five activities: m1, m2, a typed message from a bot, m4, m5. */
      const fiveActivities = Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const started = yield* startConversation(channel.secret)
        const ids: Array<string> = []
        for (const body of [
          { text: "m1" },
          { text: "m2", channelData: { k: 1 } },
          { from: { id: "bot-1" }, messageType: "buttons", payload: { text: "pick", buttons: [{ label: "A", value: "a" }] } },
          { text: "m4", attachments: [{ contentType: "image/png", contentUrl: "https://example.com/a.png" }] },
          { text: "m5" }
        ]) ids.push((yield* post(started.token, started.id, body)).body.id)
        return { ...started, channel, tenant, ids }
      })
      const list = (token: string, id: string, query = "") => chat("GET", `/conversations/${id}/activities${query}`, { bearer: token })
      const texts = (reply: { readonly body: any }) => reply.body.activities.map((a: any) => a.text)

      it.effect("the client shape without seq, oldest first; the watermark of the last one; an empty page echoes the position", () =>
        Effect.gen(function*() {
          const { id, ids, token } = yield* fiveActivities
          const all = yield* list(token, id)
          expect(all.status).toBe(200)
          expect(all.body).toEqual({ activities: expect.any(Array), watermark: 5, has_more: false })
          expect(texts(all)).toEqual(["m1", "m2", "pick", "m4", "m5"])
          expect(all.body.activities[1]).toEqual({
            id: ids[1],
            type: "message",
            from: { id: "alice" },
            text: "m2",
            timestamp: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/),
            attachments: [],
            conversationId: id,
            channelData: { k: 1 },
            replyToId: null,
            messageType: null,
            payload: null,
            editedAt: null,
            deletedAt: null
          })
          expect(all.body.activities[2]).toMatchObject({ from: { id: "bot-1" }, messageType: "buttons", payload: { text: "pick" } })
          expect((yield* list(token, id, "?watermark=5")).body).toEqual({ activities: [], watermark: 5, has_more: false })
          expect((yield* list(token, id, "?watermark=9")).body).toEqual({ activities: [], watermark: 9, has_more: false })
        }))

      it.effect("forward paging with the watermark: nothing duplicated or skipped; every accepted form; an invalid one starts over", () =>
        Effect.gen(function*() {
          const { id, ids, token } = yield* fiveActivities
          const seen: Array<string> = []
          let watermark: number | null = null
          for (let pages = 0; pages < 5; pages++) {
            const page: { readonly body: any } = yield* list(token, id, `?limit=2${watermark === null ? "" : `&watermark=${watermark}`}`)
            seen.push(...texts(page))
            watermark = page.body.watermark
            if (!page.body.has_more) break
          }
          expect(seen).toEqual(["m1", "m2", "pick", "m4", "m5"])
          const opaque = Buffer.from("seq:2").toString("base64url")
          const legacy = Buffer.from(ids[1]!).toString("base64url")
          for (const form of ["2", opaque, legacy]) {
            const reply = yield* list(token, id, `?watermark=${form}`)
            expect(texts(reply), form).toEqual(["pick", "m4", "m5"])
          }
          expect((yield* list(token, id, `?watermark=${opaque}`)).headers.get("deprecation")).not.toBeNull()
          expect((yield* list(token, id, "?watermark=2")).headers.get("deprecation")).toBeNull()
          for (const invalid of ["garbage", "-3", Buffer.from(crypto.randomUUID()).toString("base64url")]) {
            const reply = yield* list(token, id, `?watermark=${invalid}`)
            expect(reply.status).toBe(200)
            expect(texts(reply), invalid).toEqual(["m1", "m2", "pick", "m4", "m5"])
          }
        }))

      it.effect("backward paging: the newest first page, cursor as the next before, null at the first activity", () =>
        Effect.gen(function*() {
          const { id, token } = yield* fiveActivities
          const newest = yield* list(token, id, "?direction=backward&limit=2")
          expect(newest.body).toMatchObject({ watermark: 5, has_more: true, cursor: "4" })
          expect(texts(newest)).toEqual(["m4", "m5"])
          const older = yield* list(token, id, `?direction=backward&limit=2&before=${newest.body.cursor}`)
          expect(older.body).toMatchObject({ watermark: 3, has_more: true, cursor: "2" })
          expect(texts(older)).toEqual(["m2", "pick"])
          const first = yield* list(token, id, `?direction=backward&limit=2&before=${older.body.cursor}`)
          expect(first.body).toEqual({ activities: [expect.objectContaining({ text: "m1" })], watermark: 1, has_more: false, cursor: null })
          expect((yield* list(token, id, "?direction=backward&before=1")).body).toEqual({ activities: [], watermark: null, has_more: false, cursor: null })
          expect((yield* list(token, id, "?limit=2")).body).not.toHaveProperty("cursor")
        }))

      it.effect("format=frames: frames relative to the token's user (or userId for a token without one), cursor on backward pages", () =>
        Effect.gen(function*() {
          const { channel, id, ids, token } = yield* fiveActivities
          const frames = yield* list(token, id, "?format=frames")
          expect(frames.body).toEqual({ frames: expect.any(Array), watermark: 5, has_more: false })
          expect(frames.body.frames[0]).toEqual({
            type: "text",
            seq: 1,
            id: ids[0],
            from: "user",
            sender: { id: "alice", role: "user" },
            data: { text: "m1" },
            timestamp: expect.any(Number)
          })
          expect(frames.body.frames[2]).toMatchObject({ type: "buttons", seq: 3, from: "bot", sender: { id: "bot-1", role: "bot" }, data: { text: "pick" } })
          expect(frames.body.frames[3].data).toEqual({ text: "m4", attachments: [{ contentType: "image/png", contentUrl: "https://example.com/a.png" }] })
          const anonymous = yield* generateToken(channel.secret, { scope: "channel" })
          const asBot = yield* list(anonymous, id, "?format=frames&userId=bot-1")
          expect(asBot.body.frames.map((f: any) => f.from)).toEqual(["bot", "bot", "user", "bot", "bot"])
          const ignored = yield* list(token, id, "?format=frames&userId=bot-1")
          expect(ignored.body.frames[0].from).toBe("user")
          const backward = yield* list(token, id, "?format=frames&direction=backward&limit=1")
          expect(backward.body).toMatchObject({ watermark: 5, has_more: true, cursor: "5" })
        }))

      it.effect("400 for a malformed before, direction, format or limit; 403 without read or on another conversation; 404 for another channel's", () =>
        Effect.gen(function*() {
          const { channel, id, tenant, token } = yield* fiveActivities
          for (const query of ["?before=0", "?before=abc", "?before=-1", "?before=1.5", "?direction=sideways", "?format=xml", "?limit=0"]) {
            expectError(yield* list(token, id, query), 400, "bad_request", null, query)
          }
          const writeOnly = yield* generateToken(channel.secret, { permissions: ["write"] })
          expectError(yield* list(writeOnly, id), 403, "insufficient_permission", { required: ["read"] })
          const other = yield* insertChannel(tenant.id)
          const theirs = yield* startConversation(other.secret)
          expectError(yield* list(token, theirs.id), 403, "forbidden")
          const unscoped = yield* generateToken(channel.secret)
          const foreign = yield* list(unscoped, theirs.id)
          expectError(foreign, 404, "not_found")
        }))
    })

    describe("GET /conversations", () => {
      const listConversations = (token: string, query = "") => chat("GET", `/conversations${query}`, { bearer: token })

      it.effect("a channel-scoped read token lists its channel's conversations, most recently active first, as list items", () =>
        Effect.gen(function*() {
          const { channel, tenant } = yield* tenantWithChannel
          const other = yield* insertChannel(tenant.id)
          yield* startConversation(other.secret)
          const titled = yield* startConversation(channel.secret, { user: { id: "alice" } }, { title: "Order 42" })
          const plain = yield* startConversation(channel.secret, { user: { id: "carol" } })
          const anonymous = yield* startConversation(channel.secret, {})
          const hello = yield* post(titled.token, titled.id, { text: "hello" })
          yield* post(titled.token, titled.id, { type: "event", channelData: { e: 1 } })
          const gone = yield* post(plain.token, plain.id, { text: "oops" })
          yield* post(plain.token, plain.id, { type: "messageDelete", replyToId: gone.body.id })
          const token = yield* generateToken(channel.secret, { scope: "channel", permissions: ["read"] })
          const reply = yield* listConversations(token)
          expect(reply.status).toBe(200)
          expect(reply.body).toEqual({ conversations: expect.any(Array), cursor: null, has_more: false })
          expect(reply.body.conversations.map((c: any) => c.id)).toEqual([plain.id, titled.id, anonymous.id])
          const [deleted, withTitle, none] = reply.body.conversations
          expect(withTitle).toEqual({
            id: titled.id,
            title: "Order 42",
            contact: "alice",
            status: "active",
            lastMessage: "hello",
            lastMessageAt: expect.any(Number),
            lastSeq: 2,
            metadata: { source: "client_api", title: "Order 42" },
            createdAt: expect.stringMatching(/Z$/),
            updatedAt: expect.stringMatching(/Z$/)
          })
          const stored = yield* storedActivities(tenant.api_key, titled.id)
          expect(withTitle.lastMessageAt).toBe(Date.parse(stored[0].inserted_at))
          expect(stored[0].id).toBe(hello.body.id)
          expect(deleted).toMatchObject({ title: "carol", contact: "carol", lastMessage: null, lastSeq: 2 })
          expect(none).toMatchObject({ title: "user", contact: "user", lastMessage: null, lastSeq: 0, lastMessageAt: Date.parse(none.updatedAt) })
        }))

      it.effect("keyset pages on (updatedAt, id) with nothing repeated or skipped; status and updated_since in both forms", () =>
        Effect.gen(function*() {
          const { channel } = yield* tenantWithChannel
          const started: Array<string> = []
          for (let i = 0; i < 5; i++) started.push((yield* startConversation(channel.secret)).id)
          const closing = yield* startConversation(channel.secret)
          yield* chat("POST", `/conversations/${closing.id}/close`, { bearer: closing.token })
          const token = yield* generateToken(channel.secret, { scope: "channel" })
          const all = (yield* listConversations(token)).body.conversations as Array<any>
          const seen: Array<string> = []
          let cursor: string | null = null
          for (let pages = 0; pages < 10; pages++) {
            const page: { readonly body: any } = yield* listConversations(token, `?limit=2${cursor === null ? "" : `&cursor=${cursor}`}`)
            seen.push(...page.body.conversations.map((c: any) => c.id))
            cursor = page.body.cursor
            expect(page.body.has_more).toBe(cursor !== null)
            if (cursor === null) break
          }
          expect(seen).toEqual(all.map((c) => c.id))
          expect(seen.length).toBe(6)
          expect((yield* listConversations(token, "?status=closed")).body.conversations.map((c: any) => c.id)).toEqual([closing.id])
          expect((yield* listConversations(token, "?status=active")).body.conversations.length).toBe(5)
          const since = all[2].updatedAt as string
          const iso = yield* listConversations(token, `?updated_since=${encodeURIComponent(since)}`)
          expect(iso.body.conversations.map((c: any) => c.id)).toEqual(all.slice(0, 3).map((c) => c.id))
          const ms = yield* listConversations(token, `?updated_since=${Date.parse(all[2].updatedAt) + 1}`)
          expect(ms.body.conversations.every((c: any) => Date.parse(c.updatedAt) >= Date.parse(all[2].updatedAt) + 1)).toBe(true)
          expect((yield* listConversations(token, `?updated_since=${Date.now() + 60_000}`)).body.conversations).toEqual([])
        }))

      it.effect("400 for a bad cursor, status, updated_since or limit; 403 forbidden for unscoped and bound tokens, insufficient_permission without read", () =>
        Effect.gen(function*() {
          const { channel } = yield* tenantWithChannel
          const { parent, token } = yield* startConversation(channel.secret)
          const scoped = yield* generateToken(channel.secret, { scope: "channel" })
          for (const query of ["?cursor=nope", "?status=open", "?updated_since=yesterday", "?updated_since=2030-02-30T00:00:00Z", "?updated_since=99999999999999", "?limit=-1"]) {
            expectError(yield* listConversations(scoped, query), 400, "bad_request", null, query)
          }
          expectError(yield* listConversations(parent), 403, "forbidden")
          expectError(yield* listConversations(token), 403, "forbidden")
          const writeOnly = yield* generateToken(channel.secret, { scope: "channel", permissions: ["write"] })
          expectError(yield* listConversations(writeOnly), 403, "insufficient_permission", { required: ["read"] })
        }))
    })
  }
)
