import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { TokenSigner } from "../src/auth/TokenSigner.js"
import { MAX_JSON_BODY_BYTES } from "../src/http/EdgeRules.js"
import { conversationRoutes, insertChannel, insertConversation, storedState, tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { rawRequest } from "./support/RawHttp.js"
import { expectError, statusAndCode } from "./support/Envelope.js"
import { commitWhenWaiting, query, serverUrl } from "./support/TestDatabase.js"
import { admin, createTenant, type Reply, request, TestNode, TestNodeLive } from "./support/TestNode.js"
import { TestSigner } from "./support/TestSigner.js"

/** A client address of its own per test: `token_create` counts per address (the node trusts 127.0.0.1). */
const randomIp = () => `10.${Math.floor(Math.random() * 256)}.${Math.floor(Math.random() * 256)}.${Math.floor(Math.random() * 256)}`

const post = (
  path: "/tokens" | "/conversations",
  options: { readonly secret?: string; readonly body?: unknown; readonly raw?: string; readonly ip?: string; readonly headers?: Record<string, string> }
) =>
  request("POST", `/api/v1${path}`, {
    ...(options.body === undefined ? {} : { body: options.body }),
    ...(options.raw === undefined ? {} : { raw: options.raw }),
    headers: {
      "x-forwarded-for": options.ip ?? randomIp(),
      ...(options.secret === undefined ? {} : { "x-channel-token": options.secret }),
      ...options.headers
    }
  })

const raw = (options: Parameters<typeof rawRequest>[1]) =>
  Effect.flatMap(TestNode, ({ baseUrl }) => rawRequest(baseUrl, options))

const expectDeprecated = (reply: Reply) => {
  expect(reply.headers.get("deprecation")).toMatch(/^@\d+$/)
  expect(reply.headers.get("link")).toMatch(/rel="deprecation"/)
}

const conversationCount = (tenantId: string) =>
  Effect.map(query<{ n: string }>("SELECT count(*) AS n FROM conversations WHERE tenant_id = $1", [tenantId]), (rows) =>
    Number(rows[0]!.n))

const deactivateChannel = (id: string) => query("UPDATE channels SET status = 'inactive' WHERE id = $1", [id])
const deactivateTenant = (id: string) =>
  Effect.tap(admin("PATCH", `/tenants/${id}`, { tenant: { status: "inactive" } }), (reply) => expect(reply.status).toBe(200))

/** Verifies with a signer of its own, as another node would. */
const verify = (token: string) => Effect.flatMap(TokenSigner, (signer) => signer.verify(token)).pipe(Effect.provide(TestSigner()))

layer(
  TestNodeLive({
    TRUSTED_PROXIES: "127.0.0.1/32",
    RATE_LIMITS: JSON.stringify({ token_create: { limit: 2, scale_ms: 60000 } })
  }),
  { excludeTestServices: true }
)("deprecated channel-token routes", (it) => {
  describe("POST /api/v1/tokens", () => {
    it.effect("201 with a conversation-bound JWT for the legacy socket, valid 3600 s, marked deprecated", () =>
      Effect.gen(function*() {
        const { channel, conversationId, tenant } = yield* tenantWithConversation
        const reply = yield* post("/tokens", { secret: channel.secret, body: { conversation_id: conversationId, user_id: "user-1" } })
        expect(reply.status).toBe(201)
        expect(reply.body).toEqual({ token: expect.any(String), expires_in: 3600 })
        expectDeprecated(reply)
        const claims = yield* verify(reply.body.token)
        expect(claims).toEqual({
          sub: "user-1",
          user_id: "user-1",
          conversation_id: conversationId,
          tid: tenant.id,
          cid: channel.id,
          fam: expect.stringMatching(/^[0-9a-f-]{36}$/),
          jti: expect.stringMatching(/^[0-9a-f-]{36}$/),
          iat: expect.any(Number),
          exp: claims.iat + 3600
        })
        const again = yield* post("/tokens", { secret: channel.secret, body: { conversation_id: conversationId, user_id: "user-1" } })
        const second = yield* verify(again.body.token)
        expect(second.jti).not.toBe(claims.jti)
        expect(second.fam).not.toBe(claims.fam)
      }))

    it.effect("user_id up to 256 characters; the token is refused as x-channel-token (401)", () =>
      Effect.gen(function*() {
        const { channel, conversationId } = yield* tenantWithConversation
        const userId = "u".repeat(256)
        const reply = yield* post("/tokens", { secret: channel.secret, body: { conversation_id: conversationId, user_id: userId } })
        expect(reply.status).toBe(201)
        expect((yield* verify(reply.body.token)).sub).toBe(userId)
        const asChannelToken = yield* request("GET", `/api/v1/conversations/${conversationId}`, {
          headers: { "x-channel-token": reply.body.token }
        })
        expectError(asChannelToken, 401, "unauthorized")
      }))

    it.effect("a missing x-channel-token is 400 bad_request, still marked deprecated", () =>
      Effect.gen(function*() {
        const { conversationId, key } = yield* tenantWithConversation
        const body = { conversation_id: conversationId, user_id: "u" }
        for (const headers of [{}, { "x-channel-token": "" }, { "x-api-key": key }]) {
          const reply = yield* post("/tokens", { body, headers })
          expectError(reply, 400, "bad_request")
          expectDeprecated(reply)
        }
      }))

    it.effect("an unknown secret, or one of an inactive tenant, is 401; an inactive channel 403 channel_inactive", () =>
      Effect.gen(function*() {
        const { channel, conversationId, tenant } = yield* tenantWithConversation
        const body = { conversation_id: conversationId, user_id: "u" }
        expectError(yield* post("/tokens", { secret: "cs_unknown", body }), 401, "unauthorized")
        const other = yield* tenantWithConversation
        yield* deactivateChannel(other.channel.id)
        const inactiveChannel = yield* post("/tokens", { secret: other.channel.secret, body: { ...body, conversation_id: other.conversationId } })
        // The token's own channel: 403 (client-api.md "Errors").
        expectError(inactiveChannel, 403, "channel_inactive")
        expectDeprecated(inactiveChannel)
        yield* deactivateTenant(tenant.id)
        expectError(yield* post("/tokens", { secret: channel.secret, body }), 401, "unauthorized")
      }))

    it.effect("a missing or malformed field is 400 bad_request", () =>
      Effect.gen(function*() {
        const { channel, conversationId } = yield* tenantWithConversation
        const bodies: Array<{ readonly body?: unknown; readonly raw?: string }> = [
          { raw: "" },
          { body: {} },
          { body: { conversation_id: conversationId } },
          { body: { user_id: "u" } },
          { body: { conversation_id: "not-a-uuid", user_id: "u" } },
          { body: { conversation_id: conversationId, user_id: "" } },
          { body: { conversation_id: conversationId, user_id: "u".repeat(257) } },
          { body: { conversation_id: conversationId, user_id: 42 } },
          // The token's user id becomes the sender of what its holder posts: it must be storable text.
          { body: { conversation_id: conversationId, user_id: "a\u0000b" } },
          { body: { conversation_id: conversationId, user_id: "a\ud800" } },
          { body: [conversationId, "u"] },
          { raw: "{not json" }
        ]
        for (const body of bodies) {
          expectError(yield* post("/tokens", { secret: channel.secret, ...body }), 400, "bad_request")
        }
      }))

    it.effect("an unknown or foreign conversation is 404; one on another channel of the tenant 403", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithConversation
        const foreign = yield* tenantWithConversation
        const sibling = yield* insertChannel(tenant.id)
        const siblingConversation = yield* insertConversation(tenant.id, sibling.id)
        const ask = (conversationId: string) =>
          post("/tokens", { secret: channel.secret, body: { conversation_id: conversationId, user_id: "u" } })
        expectError(yield* ask(crypto.randomUUID()), 404, "not_found")
        expectError(yield* ask(foreign.conversationId), 404, "not_found")
        expectError(yield* ask(siblingConversation), 403, "forbidden")
      }))

    it.effect("token_create counts per client address: 429 rate_limited with retry-after past the limit", () =>
      Effect.gen(function*() {
        const { channel, conversationId } = yield* tenantWithConversation
        const ip = randomIp()
        const body = { conversation_id: conversationId, user_id: "u" }
        expect((yield* post("/tokens", { secret: channel.secret, body, ip })).status).toBe(201)
        // Failed attempts count too, so secrets cannot be guessed faster than the limit.
        expectError(yield* post("/tokens", { secret: "cs_guess", body, ip }), 401, "unauthorized")
        const refused = yield* post("/tokens", { secret: channel.secret, body, ip })
        expectError(refused, 429, "rate_limited", { retry_after_ms: expect.any(Number) })
        const ms = refused.body.error.details.retry_after_ms
        expect(ms).toBeGreaterThan(0)
        expect(ms).toBeLessThanOrEqual(60_000)
        expect(Number(refused.headers.get("retry-after"))).toBe(Math.max(1, Math.ceil(ms / 1000)))
        expectDeprecated(refused)
        expect((yield* post("/tokens", { secret: channel.secret, body, ip: randomIp() })).status).toBe(201)
      }))

    it.effect("token_create counts an IPv6 client by its /64, and an IPv4-mapped address as its IPv4 address", () =>
      Effect.gen(function*() {
        const { channel, conversationId } = yield* tenantWithConversation
        const body = { conversation_id: conversationId, user_id: "u" }
        const status = (ip: string) => Effect.map(post("/tokens", { secret: channel.secret, body, ip }), (reply) => reply.status)
        const network = `2001:db8:${Math.floor(Math.random() * 65_536).toString(16)}:${Math.floor(Math.random() * 65_536).toString(16)}`
        expect([
          yield* status(`${network}::1`),
          yield* status(`${network}:ffff:ffff:ffff:ffff`),
          yield* status(`${network}::2`)
        ]).toEqual([201, 201, 429])
        const ip = randomIp()
        expect([yield* status(`::ffff:${ip}`), yield* status(ip), yield* status(ip)]).toEqual([201, 201, 429])
      }))
  })

  describe("POST /api/v1/conversations", () => {
    it.effect("201 creates an active conversation on the token's channel, participant null, marked deprecated", () =>
      Effect.gen(function*() {
        const { channel, key, tenant } = yield* tenantWithConversation
        const reply = yield* post("/conversations", { secret: channel.secret, body: { metadata: { topic: "billing" } } })
        expect(reply.status).toBe(201)
        expectDeprecated(reply)
        expect(reply.body.data).toEqual({
          id: expect.stringMatching(/^[0-9a-f-]{36}$/),
          status: "active",
          metadata: { topic: "billing" },
          channel_id: channel.id,
          origin_channel_id: channel.id,
          tenant_id: tenant.id,
          participant_id: null,
          participant: null,
          inserted_at: expect.any(String),
          updated_at: expect.any(String)
        })
        const fetched = yield* tenantApi(key, "GET", `/conversations/${reply.body.data.id}`)
        expect(fetched.body.data.channels).toEqual([
          { channel_id: channel.id, role: "origin", participant_id: null, inserted_at: expect.any(String) }
        ])
      }))

    it.effect("status closed is stored closed, without activities (reopening appends the reopen event); no body at all means active with empty metadata", () =>
      Effect.gen(function*() {
        const { channel, key } = yield* tenantWithConversation
        const closed = yield* post("/conversations", { secret: channel.secret, body: { status: "closed" } })
        expect(closed.status).toBe(201)
        expect(closed.body.data).toMatchObject({ status: "closed", metadata: {} })
        const rows = yield* query<{ status: string; closed_at: string | null }>(
          "SELECT status, closed_at FROM conversations WHERE id = $1",
          [closed.body.data.id]
        )
        expect(rows).toEqual([{ status: "closed", closed_at: expect.any(String) }])
        const activities = `/conversations/${closed.body.data.id}/activities`
        expect((yield* tenantApi(key, "GET", activities)).body.data).toEqual([])
        expect((yield* tenantApi(key, "POST", `/conversations/${closed.body.data.id}/reopen`)).status).toBe(200)
        const events = (yield* tenantApi(key, "GET", activities)).body.data as ReadonlyArray<{ seq: number; type: string; metadata: { event?: string } }>
        expect(events.map((a) => [a.seq, a.type, a.metadata.event])).toEqual([[1, "conversationUpdate", "conversation_reopened"]])
        const bare = yield* post("/conversations", { secret: channel.secret })
        expect(bare.status).toBe(201)
        expect(bare.body.data).toMatchObject({ status: "active", metadata: {} })
      }))

    it.effect("a missing header is 400, an inactive channel 400 channel_inactive, a bad token or inactive tenant 401; nothing stored", () =>
      Effect.gen(function*() {
        const { channel, key, tenant } = yield* tenantWithConversation
        const before = yield* conversationCount(tenant.id)
        for (const headers of [{}, { "x-channel-token": "" }, { "x-api-key": key }]) {
          const reply = yield* post("/conversations", { body: {}, headers })
          expectError(reply, 400, "bad_request")
          expectDeprecated(reply)
        }
        expectError(yield* post("/conversations", { secret: "cs_unknown", body: {} }), 401, "unauthorized")
        const sibling = yield* insertChannel(tenant.id)
        yield* deactivateChannel(sibling.id)
        expectError(yield* post("/conversations", { secret: sibling.secret, body: {} }), 400, "channel_inactive")
        yield* deactivateTenant(tenant.id)
        expectError(yield* post("/conversations", { secret: channel.secret, body: {} }), 401, "unauthorized")
        expect(yield* conversationCount(tenant.id)).toBe(before)
      }))

    it.effect.runIf(serverUrl !== undefined)(
      "a create racing the delete of its channel or tenant is 401, as its token is after it; nothing stored",
      () =>
        Effect.gen(function*() {
          for (const table of ["channels", "tenants"] as const) {
            const tenant = yield* createTenant()
            const channel = yield* insertChannel(tenant.id)
            const create = post("/conversations", { secret: channel.secret, body: {} })
            // The token is checked while the delete is uncommitted; the create meets it at the channel's row.
            const raced = yield* commitWhenWaiting(
              [[`DELETE FROM ${table} WHERE id = $1`, [table === "channels" ? channel.id : tenant.id]]],
              create
            )
            expectError(raced, 401, "unauthorized")
            expectDeprecated(raced)
            expect(statusAndCode(yield* create), table).toEqual(statusAndCode(raced))
            expect(yield* conversationCount(tenant.id), table).toBe(0)
          }
        })
    )

    it.effect.runIf(serverUrl !== undefined)(
      "a create racing the deactivation of its channel is 400 channel_inactive, as after it; nothing stored",
      () =>
        Effect.gen(function*() {
          const tenant = yield* createTenant()
          const channel = yield* insertChannel(tenant.id)
          const create = post("/conversations", { secret: channel.secret, body: {} })
          // As the management API deactivates a channel: the row lock first, then the write.
          const raced = yield* commitWhenWaiting([
            ["SELECT 1 FROM channels WHERE id = $1 FOR UPDATE", [channel.id]],
            ["UPDATE channels SET status = 'inactive', updated_at = now() WHERE id = $1", [channel.id]]
          ], create)
          expectError(raced, 400, "channel_inactive")
          expect(statusAndCode(yield* create)).toEqual(statusAndCode(raced))
          expect(yield* conversationCount(tenant.id)).toBe(0)
        })
    )

    it.effect("an invalid body is 401 unauthorized and stores nothing", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithConversation
        const before = yield* conversationCount(tenant.id)
        const bodies: Array<{ readonly body?: unknown; readonly raw?: string }> = [
          { body: { status: "open" } },
          { body: { status: null } },
          { body: { metadata: [1] } },
          { body: { metadata: "x" } },
          { body: { metadata: null } },
          { body: ["active"] },
          { raw: "{not json" },
          // Valid JSON that PostgreSQL cannot store (U+0000 in jsonb)
          { body: { metadata: { k: "a\u0000b" } } },
          // Metadata that would be stored changed: 1e999 as null, a __proto__ key dropped or renamed.
          { raw: `{"metadata": {"n": 1e999}}` },
          { raw: `{"metadata": {"__proto__": {"x": 1}}}` },
          { raw: `{"metadata": {"list": [{"__proto__": 1}]}}` },
          { raw: `{"metadata": {"s": "half a pair \\ud800"}}` }
        ]
        for (const body of bodies) {
          const reply = yield* post("/conversations", { secret: channel.secret, ...body })
          expectError(reply, 401, "unauthorized")
          expectDeprecated(reply)
        }
        // Bodies the edge refuses elsewhere (another type, nesting past 100 levels) are invalid bodies here.
        const form = { raw: "status=closed", headers: { "content-type": "application/x-www-form-urlencoded" } }
        const deep = { raw: `{"metadata": {"m": ${"[".repeat(150)}${"]".repeat(150)}}}`, headers: { "content-type": "application/json" } }
        for (const body of [form, deep]) {
          expectError(yield* post("/conversations", { secret: channel.secret, ...body }), 401, "unauthorized")
          // The token is checked first: a bad one is 401 too, a missing one 400.
          expectError(yield* post("/conversations", { secret: "cs_unknown", ...body }), 401, "unauthorized")
          const missing = yield* post("/conversations", body)
          expectError(missing, 400, "bad_request")
          expectDeprecated(missing)
        }
        expect(yield* conversationCount(tenant.id)).toBe(before)
      }))

    it.effect("a body over the size limit is an invalid body: 401, with a Content-Length and chunked; nothing stored", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithConversation
        const before = yield* conversationCount(tenant.id)
        const body = JSON.stringify({ metadata: { a: "x".repeat(MAX_JSON_BODY_BYTES) } })
        const headers = { "content-type": "application/json", "x-channel-token": channel.secret, "x-forwarded-for": randomIp() }
        const sized = yield* raw({
          method: "POST",
          path: "/api/v1/conversations",
          headers: { ...headers, "content-length": String(Buffer.byteLength(body)) },
          chunks: [body]
        })
        const chunks = Array.from({ length: Math.ceil(body.length / 65536) }, (_, i) => body.slice(i * 65536, (i + 1) * 65536))
        const chunked = yield* raw({ method: "POST", path: "/api/v1/conversations", headers, chunks })
        for (const reply of [sized, chunked]) {
          expectError({ status: reply.status, body: JSON.parse(reply.text) }, 401, "unauthorized")
          expect(reply.headers["deprecation"]).toMatch(/^@\d+$/)
        }
        expect(yield* conversationCount(tenant.id)).toBe(before)
      }))

    it.effect("GET /api/v1/conversations on the same path still lists with x-api-key", () =>
      Effect.gen(function*() {
        const { channel, conversationId, key } = yield* tenantWithConversation
        const created = yield* post("/conversations", { secret: channel.secret, body: {} })
        const list = yield* tenantApi(key, "GET", "/conversations")
        expect(list.status).toBe(200)
        expect(list.body.data.map((c: { id: string }) => c.id).sort()).toEqual([conversationId, created.body.data.id].sort())
        expect(list.headers.get("deprecation")).toBeNull()
      }))
  })

  it.effect("the route table knows the raw routes: 405 for other methods, their template in metrics", () =>
    Effect.gen(function*() {
      const wrongMethod = yield* request("GET", "/api/v1/tokens")
      expectError(wrongMethod, 405, "method_not_allowed")
      expect(wrongMethod.headers.get("allow")).toBe("POST")
      expect((yield* request("DELETE", "/api/v1/conversations")).headers.get("allow")).toBe("GET, POST, HEAD")
      yield* post("/tokens", {})
      const metrics = yield* request("GET", "/metrics")
      expect(metrics.body).toContain('parley_http_requests_total{route="/api/v1/tokens",method="POST",status="400"}')
    }))

  it.effect("every answer with a channel token or on a legacy route is marked, refusals before any route included", () =>
    Effect.gen(function*() {
      const { channel, conversationId } = yield* tenantWithConversation
      const token = { "x-channel-token": channel.secret }
      const replies: Array<[Reply, number]> = [
        [yield* request("GET", "/api/v1/tokens", { headers: token }), 405],
        [yield* request("GET", "/api/v1/conversations", { headers: token }), 403],
        [yield* request("GET", "/api/v1/manage/channels", { headers: token }), 403],
        [yield* request("GET", `/api/v1/conversations/${conversationId}`, { headers: { ...token, accept: "text/html" } }), 406],
        [
          yield* request("POST", `/api/v1/conversations/${conversationId}/activities`, {
            raw: "text=hi",
            headers: { ...token, "content-type": "application/x-www-form-urlencoded" }
          }),
          400
        ]
      ]
      for (const [reply, status] of replies) {
        expect(reply.status).toBe(status)
        expect(reply.headers.get("deprecation"), String(status)).not.toBeNull()
        expectDeprecated(reply)
      }
    }))

  describe("x-channel-token on the tenant API (K, T routes)", () => {
    it.effect("GET /conversations/:id answers its own channel's conversation, marked deprecated; another channel's is 404", () =>
      Effect.gen(function*() {
        const { channel, conversationId, tenant } = yield* tenantWithConversation
        const sibling = yield* insertChannel(tenant.id)
        const siblingConversation = yield* insertConversation(tenant.id, sibling.id)
        const get = (id: string) => request("GET", `/api/v1/conversations/${id}`, { headers: { "x-channel-token": channel.secret } })
        const own = yield* get(conversationId)
        expect(own.status).toBe(200)
        expect(own.body.data).toMatchObject({ id: conversationId, channel_id: channel.id })
        expectDeprecated(own)
        expectError(yield* get(siblingConversation), 404, "not_found")
        // The page the Link header names is served by the node itself.
        const link = /^<([^>]+)>/.exec(own.headers.get("link") ?? "")?.[1]
        const page = yield* request("GET", link!)
        expect(page.status).toBe(200)
        expect(page.headers.get("content-type")).toContain("text/markdown")
        expect(page.body).toContain("x-channel-token")
        // A refused channel token was a use of the deprecated surface too.
        const refused = yield* request("GET", `/api/v1/conversations/${conversationId}`, { headers: { "x-channel-token": "cs_unknown" } })
        expectError(refused, 401, "unauthorized")
        expectDeprecated(refused)
      }))

    /** Every route of conversation `id` (all K, T) refuses the token with `status` `code`, and the conversation stays as it was. */
    const refusedOnEveryRoute = (secret: string, id: string, status: number, code: string) =>
      Effect.gen(function*() {
        const before = yield* storedState(id)
        for (const [method, path, body] of conversationRoutes(id)) {
          const reply = yield* request(method, `/api/v1${path}`, { headers: { "x-channel-token": secret }, ...(body && { body }) })
          expectError(reply, status, code, null, `${method} ${path}`)
          expectDeprecated(reply)
        }
        expect(yield* storedState(id)).toEqual(before)
      })

    it.effect("another channel's conversation is 404 on every K, T route, and nothing of it changes", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithConversation
        const sibling = yield* insertChannel(tenant.id)
        yield* refusedOnEveryRoute(channel.secret, yield* insertConversation(tenant.id, sibling.id), 404, "not_found")
      }))

    it.effect("a token whose channel is inactive is 403 channel_inactive on every K, T route; nothing changes", () =>
      Effect.gen(function*() {
        const { channel, conversationId } = yield* tenantWithConversation
        yield* deactivateChannel(channel.id)
        yield* refusedOnEveryRoute(channel.secret, conversationId, 403, "channel_inactive")
      }))

    it.effect("GET /conversations (K only) refuses a channel token with 403", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithConversation
        const reply = yield* request("GET", "/api/v1/conversations", { headers: { "x-channel-token": channel.secret } })
        expectError(reply, 403, "forbidden")
        expectDeprecated(reply)
      }))

    it.effect("a request that also carries x-channel-token is marked, an append included", () =>
      Effect.gen(function*() {
        const { channel, conversationId, key } = yield* tenantWithConversation
        const headers = { "x-api-key": key, "x-channel-token": channel.secret }
        const appended = yield* request("POST", `/api/v1/conversations/${conversationId}/activities`, { headers, body: { text: "both" } })
        expect(appended.status).toBe(201)
        expectDeprecated(appended)
        const listed = yield* request("GET", `/api/v1/conversations/${conversationId}/activities`, { headers })
        expect(listed.status).toBe(200)
        expectDeprecated(listed)
      }))

    it.effect("an empty x-api-key beside a channel token is no key: the token decides, as without the header", () =>
      Effect.gen(function*() {
        const { channel, conversationId } = yield* tenantWithConversation
        const headers = { "x-api-key": "", "x-channel-token": channel.secret }
        const appended = yield* request("POST", `/api/v1/conversations/${conversationId}/activities`, { headers, body: { text: "token" } })
        expect(appended.status).toBe(201)
        expect(appended.body.data).toMatchObject({ text: "token", seq: 1 })
        expectError(yield* request("GET", "/api/v1/conversations", { headers }), 403, "forbidden")
        expectError(yield* request("GET", "/api/v1/manage/channels", { headers }), 403, "forbidden")
        // Without a channel token an empty key is still a missing one.
        expectError(yield* request("GET", "/api/v1/manage/channels", { headers: { "x-api-key": "" } }), 401, "unauthorized")
      }))

    it.effect("a key-authenticated request carries no deprecation headers", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const reply = yield* tenantApi(tenant.api_key, "GET", `/conversations/${crypto.randomUUID()}`)
        expectError(reply, 404, "not_found")
        expect(reply.headers.get("deprecation")).toBeNull()
      }))
  })
})
