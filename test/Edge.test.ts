import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import { connect } from "node:net"
import { createNodeServer } from "../src/http/NodeServer.js"
import { MAX_JSON_BODY_BYTES } from "../src/http/EdgeRules.js"
import { storedTexts, tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { rawRequest } from "./support/RawHttp.js"
import { EdgeApp } from "./support/EdgeApp.js"
import { envelope } from "./support/Envelope.js"
import { ADMIN_TOKEN, admin, freePort, manage, request, TestNode, TestNodeLive } from "./support/TestNode.js"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

const authorization = { authorization: `Bearer ${ADMIN_TOKEN}` }

/** A tenant body a little over the JSON limit. */
const oversizedBody = JSON.stringify({ tenant: { name: "x".repeat(MAX_JSON_BODY_BYTES) } })

const raw = (options: Parameters<typeof rawRequest>[1]) =>
  Effect.flatMap(TestNode, ({ baseUrl }) => rawRequest(baseUrl, options))

/** Writes `text` on a new connection to the node; the answer's head and body once the server closes it. */
const rawExchange = (text: string) =>
  Effect.flatMap(TestNode, ({ baseUrl }) =>
    Effect.async<readonly [head: string, body: string]>((resume) => {
      const { hostname, port } = new URL(baseUrl)
      const socket = connect(Number(port), hostname)
      let reply = ""
      socket.on("data", (chunk) => (reply += chunk.toString()))
      socket.on("close", () => {
        const [head, body] = reply.split("\r\n\r\n")
        resume(Effect.succeed([head!, body ?? ""] as const))
      })
      socket.write(text)
    }))

layer(TestNodeLive(), { excludeTestServices: true })("HTTP edge", (it) => {
  it.effect("an unknown route is 404 not_found in the envelope", () =>
    Effect.gen(function*() {
      const reply = yield* request("GET", "/api/v1/no/such/route")
      expect(reply.status).toBe(404)
      expect(reply.body).toEqual(envelope("not_found"))
      const outsideApi = yield* request("POST", "/nowhere")
      expect(outsideApi.status).toBe(404)
      expect(outsideApi.body).toEqual(envelope("not_found"))
    }))

  it.effect("another method on a known route is 405 method_not_allowed with Allow", () =>
    Effect.gen(function*() {
      const reply = yield* admin("DELETE", "/tenants")
      expect(reply.status).toBe(405)
      expect(reply.body).toEqual(envelope("method_not_allowed"))
      // HEAD is served wherever GET is, so it is allowed there too.
      expect(reply.headers.get("allow")?.split(", ").sort()).toEqual(["GET", "HEAD", "POST"])
      const item = yield* admin("POST", `/tenants/${crypto.randomUUID()}`)
      expect(item.status).toBe(405)
      expect(item.headers.get("allow")?.split(", ").sort()).toEqual(["DELETE", "GET", "HEAD", "PATCH", "PUT"])
    }))

  it.effect("Accept without JSON is 406 not_acceptable; */*, application/json and none are served", () =>
    Effect.gen(function*() {
      const html = yield* admin("GET", "/tenants", undefined, { accept: "text/html" })
      expect(html.status).toBe(406)
      expect(html.body).toEqual(envelope("not_acceptable"))
      // The router matches paths whatever their case; so does the check.
      const shouted = yield* request("GET", "/API/v1/admin/tenants", { headers: { ...authorization, accept: "text/html" } })
      expect(shouted.status).toBe(406)
      const refused = yield* admin("GET", "/tenants", undefined, { accept: "application/json;q=0, text/plain" })
      expect(refused.status).toBe(406)
      for (const accept of ["*/*", "application/json", "text/html, application/json;q=0.5"]) {
        expect((yield* admin("GET", "/tenants", undefined, { accept })).status).toBe(200)
      }
      // fetch always sends an Accept header; node:http sends none.
      const none = yield* raw({ method: "GET", path: "/api/v1/admin/tenants", headers: authorization })
      expect(none.status).toBe(200)
      // Probes are not part of the JSON API.
      expect((yield* request("GET", "/health/live", { headers: { accept: "text/html" } })).status).toBe(200)
    }))

  it.effect("a body over 1 MiB is 413 payload_too_large, with a Content-Length and chunked", () =>
    Effect.gen(function*() {
      const expected = {
        error: {
          code: "payload_too_large",
          message: expect.any(String),
          details: { max_bytes: MAX_JSON_BODY_BYTES },
          request_id: expect.any(String)
        }
      }
      const headers = { ...authorization, "content-type": "application/json" }
      const sized = yield* raw({
        method: "POST",
        path: "/api/v1/admin/tenants",
        headers: { ...headers, "content-length": String(Buffer.byteLength(oversizedBody)) },
        chunks: [oversizedBody]
      })
      expect(sized.status).toBe(413)
      expect(JSON.parse(sized.text)).toEqual(expected)
      const chunkedHeaders = { ...headers, "transfer-encoding": "chunked" }
      const chunks = Array.from({ length: 17 }, (_, i) => oversizedBody.slice(i * 65536, (i + 1) * 65536))
      const chunked = yield* raw({ method: "POST", path: "/api/v1/admin/tenants", headers: chunkedHeaders, chunks })
      expect(chunked.status).toBe(413)
      expect(JSON.parse(chunked.text)).toEqual(expected)
      // A chunked body within the limit is read as usual, and the node is still serving.
      const small = yield* raw({
        method: "POST",
        path: "/api/v1/admin/tenants",
        headers: chunkedHeaders,
        chunks: ['{"tenant":', '{"name":"chunked"}}']
      })
      expect(small.status).toBe(201)
      expect(JSON.parse(small.text).data.name).toBe("chunked")
    }))

  it.effect("a JSON body nested deeper than 100 levels is 400 bad_request on every route, the lean append route too", () =>
    Effect.gen(function*() {
      const nested = (depth: number) => "[".repeat(depth) + "]".repeat(depth)
      const tooDeep = (field: string) => `{${field}: ${nested(3000)}}`
      const { conversationId, key } = yield* tenantWithConversation
      const cases = [
        { path: "/api/v1/admin/tenants", headers: authorization, body: `{"tenant": ${tooDeep(`"name"`)}}` },
        { path: "/api/v1/manage/channels", headers: { "x-api-key": key }, body: `{"channel": {"name": "c", "type": "echo", "config": ${tooDeep(`"x"`)}}}` },
        { path: `/api/v1/conversations/${conversationId}/activities`, headers: { "x-api-key": key }, body: tooDeep(`"metadata"`) }
      ]
      for (const { body, headers, path } of cases) {
        const reply = yield* request("POST", path, { raw: body, headers })
        expect(reply.status, path).toBe(400)
        expect(reply.body).toEqual(envelope("bad_request"))
        expect(reply.body.error.message).toContain("100 levels")
      }
      // Brackets inside strings do not count, and 100 levels are still read.
      const text = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "[".repeat(500) })
      expect(text.status).toBe(201)
      const deepest = yield* request("POST", `/api/v1/conversations/${conversationId}/activities`, {
        raw: `{"metadata": {"m": ${nested(98)}}}`,
        headers: { "x-api-key": key }
      })
      expect(deepest.status).toBe(201)
      expect(yield* storedTexts(conversationId)).toHaveLength(2)
    }))

  it.effect("a string PostgreSQL cannot store in a management or admin body is 422 validation_failed naming its field", () =>
    Effect.gen(function*() {
      const { key } = yield* tenantWithConversation
      const problem = ["must be Unicode text without U+0000 or unpaired surrogates"]
      const cases = [
        { path: "/api/v1/admin/tenants", headers: authorization, body: { tenant: { name: "a\u0000b" } }, field: "name" },
        {
          path: "/api/v1/admin/tenants",
          headers: authorization,
          body: { tenant: { name: "t", allowed_upload_types: ["image/png", "text/\u0000"] } },
          field: "allowed_upload_types[1]"
        },
        {
          path: "/api/v1/manage/channels",
          headers: { "x-api-key": key },
          body: { channel: { name: "c", type: "webhook", config: { url: "https://hooks.example.com/x", headers: { "x-a": "\ud800" } } } },
          field: "config.headers.x-a"
        },
        { path: "/api/v1/manage/api_keys", headers: { "x-api-key": key }, body: { api_key: { name: "k\u0000", scopes: ["read"] } }, field: "name" }
      ]
      for (const { body, field, headers, path } of cases) {
        const reply = yield* request("POST", path, { body, headers })
        expect(reply.status, path).toBe(422)
        expect(reply.body.error).toMatchObject({ code: "validation_failed", details: { [field]: problem } })
        // Checked once the caller is known: without a valid credential the body tells nothing.
        const anonymous = yield* request("POST", path, { body })
        expect(anonymous.status, path).toBe(401)
        expect(anonymous.body.error.code).toBe("unauthorized")
      }
      const readOnly = yield* tenantApi(key, "POST", "/manage/api_keys", { api_key: { name: "reader", scopes: ["read"] } })
      const refused = yield* request("POST", "/api/v1/manage/channels", {
        body: { channel: { name: "c\u0000", type: "websocket" } },
        headers: { "x-api-key": readOnly.body.data.key }
      })
      expect(refused.status).toBe(403)
      expect(refused.body.error.code).toBe("insufficient_scope")
    }))

  it.effect("a number beyond double precision is refused per field, never stored as null", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      const problem = ["numbers must be within double precision (at most about 1.8e308)"]
      const activity = yield* request("POST", `/api/v1/conversations/${conversationId}/activities`, {
        raw: `{"text": "hi", "metadata": {"score": 1e999}}`,
        headers: { "x-api-key": key }
      })
      expect(activity.status).toBe(422)
      expect(activity.body.error).toMatchObject({ code: "invalid_message", details: { metadata: problem } })
      const typed = yield* request("POST", `/api/v1/conversations/${conversationId}/activities`, {
        raw: `{"message_type": "location", "payload": {"latitude": -1e400, "longitude": 2}}`,
        headers: { "x-api-key": key }
      })
      expect(typed.status).toBe(422)
      expect(typed.body.error).toMatchObject({ code: "invalid_message", details: { payload: problem } })
      expect(yield* storedTexts(conversationId)).toHaveLength(0)
      // Large but finite numbers are kept as sent.
      const finite = yield* request("POST", `/api/v1/conversations/${conversationId}/activities`, {
        raw: `{"text": "hi", "metadata": {"score": 1e308}}`,
        headers: { "x-api-key": key }
      })
      expect(finite.status).toBe(201)
      expect(finite.body.data.metadata).toEqual({ score: 1e308 })

      const channel = yield* request("POST", "/api/v1/manage/channels", {
        raw: `{"channel": {"name": "c", "type": "websocket", "config": {"weight": 1e999}}}`,
        headers: { "x-api-key": key }
      })
      expect(channel.status).toBe(422)
      expect(channel.body.error).toMatchObject({ code: "validation_failed", details: { "config.weight": problem } })
    }))

  it.effect("a __proto__ key in a management or admin body is 422 validation_failed naming its field, and nothing is stored", () =>
    Effect.gen(function*() {
      const { key } = yield* tenantWithConversation
      const problem = ["must not use __proto__ as a key"]
      // Raw bodies: JSON.parse makes `__proto__` an own key, which the route's schema would drop.
      const channel = yield* request("POST", "/api/v1/manage/channels", {
        raw: `{"channel": {"name": "proto", "type": "websocket", "config": {"__proto__": {"a": 1}}}}`,
        headers: { "x-api-key": key }
      })
      expect(channel.status).toBe(422)
      expect(channel.body.error).toMatchObject({ code: "validation_failed", details: { "config.__proto__": problem } })
      const tenant = yield* request("POST", "/api/v1/admin/tenants", {
        raw: `{"tenant": {"name": "proto-tenant", "__proto__": {"status": "inactive"}}}`,
        headers: authorization
      })
      expect(tenant.status).toBe(422)
      expect(tenant.body.error).toMatchObject({ code: "validation_failed", details: { "__proto__": problem } })
      const channels = yield* tenantApi(key, "GET", "/manage/channels")
      expect(channels.body.data.map((c: { name: string }) => c.name)).not.toContain("proto")
      const tenants = yield* request("GET", "/api/v1/admin/tenants?limit=500", { headers: authorization })
      expect(tenants.body.data.map((t: { name: string }) => t.name)).not.toContain("proto-tenant")
    }))

  it.effect("the router reads a body without a content type as JSON, depth limit included; other types are 400", () =>
    Effect.gen(function*() {
      const { channel, conversationId, key } = yield* tenantWithConversation
      const path = `/api/v1/conversations/${conversationId}/activities`
      // The channel token takes the router's way; no content type is read as application/json.
      const deep = yield* raw({
        method: "POST",
        path,
        headers: { "x-channel-token": channel.secret },
        chunks: [`{"metadata": {"m": ${"[".repeat(150)}${"]".repeat(150)}}}`]
      })
      expect(deep.status).toBe(400)
      expect(JSON.parse(deep.text)).toEqual(envelope("bad_request"))
      // Bodies of other types are refused, not read as a payload of fields or bytes.
      // On both ways: the router's (channel token) and the lean route's (API key).
      const others = [
        ["application/vnd.api+json", `{"text": "hi"}`],
        ["application/x-www-form-urlencoded", "text=hi"],
        ["application/json-patch+json", `{"text": "hi"}`],
        ["text/plain; note=application/json", `{"text": "hi"}`],
        // Parameters without a media type: HttpApi reads such a body as bytes, so it must not be taken for JSON.
        ["; charset=utf-8", `{"text": "hi"}`]
      ]
      for (const credential of [{ "x-channel-token": channel.secret }, { "x-api-key": key }]) {
        for (const [type, body] of others) {
          const reply = yield* raw({
            method: "POST",
            path,
            headers: { ...credential, "content-type": type! },
            chunks: [body!]
          }).pipe(Effect.timeout("10 seconds"))
          expect(reply.status, type).toBe(400)
          expect(JSON.parse(reply.text)).toEqual(envelope("bad_request"))
        }
      }
      expect(yield* storedTexts(conversationId)).toHaveLength(0)
    }))

  it.effect("a request the HTTP parser refuses gets the envelope too, then the connection closes", () =>
    Effect.gen(function*() {
      const [head, body] = yield* rawExchange("GET /health/live HTTP/1.1\r\nhost: x\r\nx-idempotency-key: a\u0001b\r\n\r\n")
      expect(head).toMatch(/^HTTP\/1\.1 400 /)
      expect(head).toMatch(/connection: close/i)
      const parsed = JSON.parse(body)
      expect(parsed).toEqual(envelope("bad_request"))
      expect(head).toContain(`x-request-id: ${parsed.error.request_id}`)
      // Counted, though no route saw it and its method could not be trusted.
      const metrics = yield* request("GET", "/metrics")
      expect(metrics.body).toContain('parley_http_requests_total{route="unparsed",method="unknown",status="400"} 1')
    }))

  it.effect("an HTTP/1.1 request without a Host header is 400 bad_request in the envelope, then the connection closes", () =>
    Effect.gen(function*() {
      const [head, body] = yield* rawExchange("GET /api/v1/admin/tenants HTTP/1.1\r\nx-request-id: no-host-1\r\n\r\n")
      expect(head).toMatch(/^HTTP\/1\.1 400 /)
      expect(head).toMatch(/connection: close/i)
      expect(head).toContain("x-request-id: no-host-1")
      expect(JSON.parse(body)).toEqual(envelope("bad_request"))
      const metrics = yield* request("GET", "/metrics")
      expect(metrics.body).toContain('parley_http_requests_total{route="unparsed",method="GET",status="400"} 1')
    }))

  it.effect("x-request-id is echoed when sane, generated otherwise, and equals error.request_id", () =>
    Effect.gen(function*() {
      const sane = yield* request("GET", "/api/v1/missing", { headers: { "x-request-id": "req-42.a:b@c_d" } })
      expect(sane.headers.get("x-request-id")).toBe("req-42.a:b@c_d")
      expect(sane.body.error.request_id).toBe("req-42.a:b@c_d")
      for (const insane of [undefined, "x".repeat(500), "has spaces in it", ""]) {
        const reply = yield* request("GET", "/api/v1/missing", {
          headers: insane === undefined ? {} : { "x-request-id": insane }
        })
        const id = reply.headers.get("x-request-id")
        expect(id).toMatch(UUID)
        expect(reply.body.error.request_id).toBe(id)
      }
      const success = yield* admin("GET", "/tenants", undefined, { "x-request-id": "ok-1" })
      expect(success.status).toBe(200)
      expect(success.headers.get("x-request-id")).toBe("ok-1")
    }))

  it.effect("an id in upper case reaches the resource of its lower-case form, on every family, and is answered lower-case", () =>
    Effect.gen(function*() {
      const { channel, conversationId, key, tenant } = yield* tenantWithConversation
      const upper = (id: string) => id.toUpperCase()
      // Admin: a path id.
      const tenantReply = yield* admin("GET", `/tenants/${upper(tenant.id)}`)
      expect([tenantReply.status, tenantReply.body.data.id]).toEqual([200, tenant.id])
      expect((yield* admin("GET", `/tenants/${upper(tenant.id)}/api_keys`)).status).toBe(200)
      // Management: a path id, and one nested under it.
      const channelReply = yield* manage(key, "GET", `/channels/${upper(channel.id)}`)
      expect([channelReply.status, channelReply.body.data.id]).toEqual([200, channel.id])
      expect((yield* manage(key, "GET", `/channels/${upper(channel.id)}/publishable_keys`)).status).toBe(200)
      // Tenant API: a path id on the lean append route and the router, a body's reply_to_id, a filter.
      const first = yield* tenantApi(key, "POST", `/conversations/${upper(conversationId)}/activities`, { text: "one", sender: "ann" })
      expect([first.status, first.body.data.conversation_id]).toEqual([201, conversationId])
      const edit = yield* tenantApi(key, "POST", `/conversations/${upper(conversationId)}/activities`, {
        type: "messageUpdate",
        text: "one, edited",
        sender: "ann",
        reply_to_id: upper(first.body.data.id)
      })
      expect([edit.status, edit.body.data.reply_to_id]).toEqual([201, first.body.data.id])
      const got = yield* tenantApi(key, "GET", `/conversations/${upper(conversationId)}`)
      expect([got.status, got.body.data.id]).toEqual([200, conversationId])
      const page = yield* tenantApi(key, "GET", `/conversations/${upper(conversationId)}/activities`)
      expect(page.body.data.map((a: { seq: number }) => a.seq)).toEqual([1, 2])
      const listed = yield* tenantApi(key, "GET", `/conversations?channel_id=${upper(channel.id)}`)
      expect(listed.body.data.map((c: { id: string }) => c.id)).toEqual([conversationId])
      // Legacy: a body's conversation id.
      const token = yield* request("POST", "/api/v1/tokens", {
        body: { conversation_id: upper(conversationId), user_id: "u" },
        headers: { "x-channel-token": channel.secret }
      })
      expect(token.status).toBe(201)
    }))

  it.effect("every error carries exactly the four envelope keys", () =>
    Effect.gen(function*() {
      const replies = [
        yield* request("GET", "/api/v1/admin/tenants"),
        yield* admin("GET", `/tenants/${crypto.randomUUID()}`),
        yield* admin("GET", "/tenants/not-a-uuid"),
        yield* admin("POST", "/tenants", { tenant: {} }),
        yield* admin("DELETE", "/tenants"),
        yield* request("GET", "/nowhere")
      ]
      for (const reply of replies) {
        expect(reply.status).toBeGreaterThanOrEqual(400)
        expect(Object.keys(reply.body).sort()).toEqual(["error"])
        expect(Object.keys(reply.body.error).sort()).toEqual(["code", "details", "message", "request_id"])
        expect(reply.body.error.request_id).toBe(reply.headers.get("x-request-id"))
      }
    }))
})

describe("HTTP edge: defects", () => {
  /** A route that is a bug, behind the real edge, on its own server. */
  const DefectApp = (port: number) =>
    EdgeApp(
      port,
      HttpLayerRouter.add("GET", "/boom", Effect.die(new Error("secret internal detail at db.ts:42"))),
      [{ method: "GET", path: "/boom" }]
    )

  interface Captured {
    readonly message: unknown
    readonly level: string
    readonly annotations: Record<string, unknown>
    readonly cause: string
  }

  it.scopedLive("a defect is 500 internal, reveals nothing and is logged once with the request id", () =>
    Effect.gen(function*() {
      const logs: Array<Captured> = []
      const capture = Logger.make<unknown, void>(({ annotations, cause, logLevel, message }) => {
        logs.push({
          message,
          level: logLevel.label,
          annotations: Object.fromEntries(annotations),
          cause: String(cause)
        })
      })
      const port = yield* freePort
      yield* Layer.build(DefectApp(port).pipe(Layer.provide(Logger.replace(Logger.defaultLogger, capture))))

      const reply = yield* rawRequest(`http://127.0.0.1:${port}`, {
        method: "GET",
        path: "/boom",
        headers: { "x-request-id": "defect-1" }
      })
      expect(reply.status).toBe(500)
      expect(JSON.parse(reply.text)).toEqual({
        error: { code: "internal", message: "internal error", details: null, request_id: "defect-1" }
      })
      expect(reply.text).not.toContain("secret")
      expect(reply.text).not.toContain("db.ts")

      const errors = logs.filter((log) => log.level === "ERROR")
      expect(errors).toHaveLength(1)
      expect(errors[0]!.annotations["request_id"]).toBe("defect-1")
      expect(errors[0]!.cause).toContain("secret internal detail")
    }))
})

describe("node server", () => {
  // While the node stops, the platform detaches the router before it closes the listener: a request
  // accepted in between must still be answered, or it waits until the process exits.
  it.effect("a request that arrives after the router let go is answered 503 draining, and the connection closes", () =>
    Effect.gen(function*() {
      const answered: Array<unknown> = []
      const server = createNodeServer(() => false, () => false, (...answer) => answered.push(answer))
      const port = yield* Effect.async<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as { port: number }).port)))
      })
      const reply = yield* rawRequest(`http://127.0.0.1:${port}`, {
        method: "GET",
        path: "/health/live",
        headers: { "x-request-id": "late-1" }
      }).pipe(Effect.timeout("5 seconds"), Effect.ensuring(Effect.sync(() => server.close())))
      expect(reply.status).toBe(503)
      expect(reply.headers["retry-after"]).toBe("1")
      expect(reply.headers["connection"]).toBe("close")
      expect(JSON.parse(reply.text)).toEqual({
        error: {
          code: "unavailable",
          message: expect.any(String),
          details: { reason: "draining", retry_after_ms: 1000 },
          request_id: "late-1"
        }
      })
      expect(answered).toEqual([["stopping", "GET", 503]])
    }))
})
