import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { MAX_JSON_BODY_BYTES } from "../src/http/EdgeRules.js"
import { Lifecycle } from "../src/ops/Lifecycle.js"
import { envelope, expectError } from "./support/Envelope.js"
import { storedState, tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { rawRequest } from "./support/RawHttp.js"
import { query, serverUrl } from "./support/TestDatabase.js"
import { request, TestNode, TestNodeLive } from "./support/TestNode.js"

/**
 * The lean append route (src/http/AppendRoute.ts) answers `POST /conversations/:id/activities`
 * with `x-api-key` ahead of the router; these are the cases where it must answer as the router
 * does, or leave the request to it.
 */

const storedCount = (conversationId: string) =>
  Effect.map(
    query<{ n: string }>("SELECT count(*) AS n FROM activities WHERE conversation_id = $1", [conversationId]),
    (rows) => Number(rows[0]!.n)
  )

const raw = (options: Parameters<typeof rawRequest>[1]) =>
  Effect.flatMap(TestNode, ({ baseUrl }) => rawRequest(baseUrl, options))

layer(TestNodeLive(), { excludeTestServices: true })("lean append route", (it) => {
  it.effect("unreadable JSON and bodies that are not objects are 400 bad_request, and store nothing", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      const path = `/api/v1/conversations/${conversationId}/activities`
      for (const body of ["{", "[1, 2]", "\"text\"", ""]) {
        const reply = yield* request("POST", path, { raw: body, headers: { "x-api-key": key, "x-request-id": "req-lean-1" } })
        expect(reply.status, body).toBe(400)
        expect(reply.body).toEqual(envelope("bad_request"))
        expect(reply.body.error.request_id).toBe("req-lean-1")
        expect(reply.headers.get("x-request-id")).toBe("req-lean-1")
      }
      expect(yield* storedCount(conversationId)).toBe(0)
    }))

  it.effect("a missing or unknown key is 401 unauthorized; nothing is stored", () =>
    Effect.gen(function*() {
      const { conversationId } = yield* tenantWithConversation
      const path = `/api/v1/conversations/${conversationId}/activities`
      for (const apiKey of ["", "pk_not_a_key"]) {
        const reply = yield* request("POST", path, { body: { text: "hi" }, headers: { "x-api-key": apiKey } })
        expect(reply.status).toBe(401)
        expect(reply.body).toEqual(envelope("unauthorized"))
        // The caller is checked before the body, as on the router's way.
        for (const raw of ["{", "[]"]) {
          const unread = yield* request("POST", path, { raw, headers: { "x-api-key": apiKey } })
          expect(unread.status).toBe(401)
          expect(unread.body).toEqual(envelope("unauthorized"))
        }
      }
      expect(yield* storedCount(conversationId)).toBe(0)
    }))

  it.effect("a chunked body over the limit is 413 payload_too_large and the connection closes", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      const reply = yield* raw({
        method: "POST",
        path: `/api/v1/conversations/${conversationId}/activities`,
        headers: { "x-api-key": key, "content-type": "application/json" },
        chunks: ["{\"text\": \"", "x".repeat(MAX_JSON_BODY_BYTES), "\"}"]
      })
      expect(reply.status).toBe(413)
      expect(reply.headers["connection"]).toBe("close")
      const body = JSON.parse(reply.text)
      expect(body.error).toMatchObject({ code: "payload_too_large", details: { max_bytes: MAX_JSON_BODY_BYTES } })
      expect(yield* storedCount(conversationId)).toBe(0)
    }))

  it.effect("requests it does not claim get the router's answers: declared oversize, other types, Accept", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      const path = `/api/v1/conversations/${conversationId}/activities`
      const declared = yield* raw({
        method: "POST",
        path,
        headers: { "x-api-key": key, "content-type": "application/json", "content-length": String(MAX_JSON_BODY_BYTES + 1) },
        chunks: ["{"]
      })
      expect(declared.status).toBe(413)
      const text = yield* request("POST", path, { raw: "hello", headers: { "x-api-key": key, "content-type": "text/plain" } })
      expect(text.status).toBe(400)
      expect(text.body).toEqual(envelope("bad_request"))
      const html = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "hi" }, { accept: "text/html" })
      expect(html.status).toBe(406)
      expect(html.body).toEqual(envelope("not_acceptable"))
      expect(yield* storedCount(conversationId)).toBe(0)
    }))

  it.effect("a body the edge refuses before any credential is refused the same way without a valid key", () =>
    Effect.gen(function*() {
      const { conversationId } = yield* tenantWithConversation
      const path = `/api/v1/conversations/${conversationId}/activities`
      // With an x-channel-token beside the key the router serves the request (the key still
      // authenticates): its answer is the one the lean route must give.
      const ways = { lean: {}, router: { "x-channel-token": "cs_not_a_secret" } }
      for (const [way, extra] of Object.entries(ways)) {
        const headers = { "x-api-key": "ck_not_a_key", ...extra }
        const deep = yield* request("POST", path, { raw: `{"metadata": ${"[".repeat(300)}${"]".repeat(300)}}`, headers })
        expect(deep.status, way).toBe(400)
        expect(deep.body).toEqual(envelope("bad_request"))
        expect(deep.body.error.message, way).toContain("100 levels")
        const large = yield* raw({
          method: "POST",
          path,
          headers: { ...headers, "content-type": "application/json" },
          chunks: ["{\"text\": \"", "x".repeat(MAX_JSON_BODY_BYTES), "\"}"]
        })
        expect(large.status, way).toBe(413)
        expect(JSON.parse(large.text).error).toMatchObject({ code: "payload_too_large", details: { max_bytes: MAX_JSON_BODY_BYTES } })
        expect(large.headers["connection"], way).toBe("close")
      }
      expect(yield* storedCount(conversationId)).toBe(0)
    }))

  it.effect("an id in capitals and a query string reach the same conversation", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      const first = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "one" })
      const second = yield* tenantApi(key, "POST", `/conversations/${conversationId.toUpperCase()}/activities?via=test`, { text: "two" })
      expect(first.status).toBe(201)
      expect(second.status).toBe(201)
      expect(first.headers.get("content-type")).toBe("application/json")
      expect(second.body.data).toMatchObject({ seq: 2, conversation_id: conversationId, text: "two" })
      expect(yield* storedCount(conversationId)).toBe(2)
    }))

  it.effect("its requests are counted under the route template", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      expect((yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "counted" })).status).toBe(201)
      const metrics = (yield* request("GET", "/metrics")).body as string
      expect(metrics).toMatch(
        /parley_http_requests_total\{route="\/api\/v1\/conversations\/:id\/activities",method="POST",status="201"\} [1-9]/
      )
      expect(metrics).not.toContain(conversationId)
    }))

  // The embedded database runs one session: its writes cannot be held up by another one.
  it.effect.runIf(serverUrl !== undefined)(
    "an append whose write cannot finish in time is 503 unavailable and stored nowhere; its retry is stored once",
    () =>
      Effect.gen(function*() {
        const { conversationId, key } = yield* tenantWithConversation
        const sql = yield* SqlClient.SqlClient
        const before = yield* storedState(conversationId)
        const post = tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "held" }, {
          "x-idempotency-key": "held-1"
        })
        // Another session holds the conversation row until the answer has come.
        const held = yield* sql.withTransaction(
          Effect.zipRight(sql`SELECT id FROM conversations WHERE id = ${conversationId} FOR UPDATE`, post)
        )
        expectError(held, 503, "unavailable", { reason: "database_unavailable", retry_after_ms: expect.any(Number) })
        expect(Number(held.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
        expect(yield* storedState(conversationId)).toEqual(before)
        const retried = yield* post
        expect(retried.status).toBe(201)
        expect(retried.body.data).toMatchObject({ seq: 1, text: "held", idempotency_key: "held-1" })
        expect(yield* storedCount(conversationId)).toBe(1)
      })
  )

  it.effect.runIf(serverUrl !== undefined)(
    "an append whose conversation cannot even be read in time is 503 unavailable, not a request that hangs",
    () =>
      Effect.gen(function*() {
        const { conversationId, key } = yield* tenantWithConversation
        const sql = yield* SqlClient.SqlClient
        const before = yield* storedState(conversationId)
        const post = tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "cold" })
        // No append has loaded this conversation yet; another session keeps its table from being read.
        const held = yield* sql.withTransaction(
          Effect.zipRight(sql`LOCK TABLE conversations IN ACCESS EXCLUSIVE MODE`, post)
        )
        expectError(held, 503, "unavailable", { reason: "database_unavailable", retry_after_ms: expect.any(Number) })
        expect(Number(held.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
        expect(yield* storedState(conversationId)).toEqual(before)
        const retried = yield* post
        expect(retried.status).toBe(201)
        expect(retried.body.data).toMatchObject({ seq: 1, text: "cold" })
      })
  )
})

layer(TestNodeLive(), { excludeTestServices: true })("lean append route while draining", (it) => {
  it.effect("appends are still answered, and each answer closes its connection", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      yield* Effect.flatMap(Lifecycle, (lifecycle) => lifecycle.startDrain)
      const reply = yield* raw({
        method: "POST",
        path: `/api/v1/conversations/${conversationId}/activities`,
        headers: { "x-api-key": key, "content-type": "application/json" },
        chunks: [JSON.stringify({ text: "during the drain" })]
      })
      expect(reply.status).toBe(201)
      expect(reply.headers["connection"]).toBe("close")
      expect(yield* storedCount(conversationId)).toBe(1)
    }))
})
