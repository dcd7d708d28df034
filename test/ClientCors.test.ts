import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { EdgeApp } from "./support/EdgeApp.js"
import { envelope } from "./support/Envelope.js"
import { type RawReply, rawRequest } from "./support/RawHttp.js"
import { freePort, TestNode, TestNodeLive } from "./support/TestNode.js"

const APP = "https://app.example.com"
const OTHER = "https://evil.example.net"

/** What a browser sends before a cross-origin POST with a token. */
const preflightHeaders = (origin: string) => ({
  origin,
  "access-control-request-method": "POST",
  "access-control-request-headers": "authorization, content-type"
})

/** The CORS headers of an answer, by name. */
const corsOf = (reply: RawReply) =>
  Object.fromEntries(Object.entries(reply.headers).filter(([name]) => name.startsWith("access-control-")))

/** The token route stands in for the client API's routes while they are being built. */
const TokenRoute = HttpLayerRouter.add(
  "POST",
  "/api/v1/chat/tokens/generate",
  HttpServerResponse.unsafeJson({ token: "t" })
)

/** The real edge in front of the stand-in route, with `CORS_ALLOWED_ORIGINS` set to `origins` unless undefined. */
const withEdge = <A, E>(origins: string | undefined, use: (baseUrl: string) => Effect.Effect<A, E>) =>
  Effect.gen(function*() {
    const port = yield* freePort
    const env: Record<string, string> = origins === undefined ? {} : { CORS_ALLOWED_ORIGINS: origins }
    yield* Layer.build(EdgeApp(port, TokenRoute, [{ method: "POST", path: "/api/v1/chat/tokens/generate" }], env))
    return yield* use(`http://127.0.0.1:${port}`)
  })

describe("client API CORS at the edge", () => {
  it.scopedLive("by default any origin: preflight 204 with the path's methods and Authorization, Content-Type only", () =>
    withEdge(undefined, (baseUrl) =>
      Effect.gen(function*() {
        const reply = yield* rawRequest(baseUrl, {
          method: "OPTIONS",
          path: "/api/v1/chat/tokens/generate",
          headers: preflightHeaders(OTHER)
        })
        expect(reply.status).toBe(204)
        expect(reply.text).toBe("")
        expect(corsOf(reply)).toEqual({
          "access-control-allow-origin": "*",
          "access-control-allow-methods": "POST",
          "access-control-allow-headers": "Authorization, Content-Type",
          "access-control-max-age": "7200"
        })
        // The answer is the same for every origin: nothing for a cache to tell apart.
        expect(reply.headers["vary"]).toBeUndefined()

        const answer = yield* rawRequest(baseUrl, {
          method: "POST",
          path: "/api/v1/chat/tokens/generate",
          headers: { origin: OTHER }
        })
        expect(answer.status).toBe(200)
        expect(corsOf(answer)).toEqual({
          "access-control-allow-origin": "*",
          "access-control-expose-headers": "x-request-id"
        })
      })))

  it.scopedLive("with a list, a listed origin is echoed as browsers send it, with Vary: Origin", () =>
    withEdge("HTTPS://App.Example.com:443, http://localhost:3000", (baseUrl) =>
      Effect.gen(function*() {
        const reply = yield* rawRequest(baseUrl, {
          method: "OPTIONS",
          path: "/api/v1/chat/tokens/generate?x=1",
          headers: preflightHeaders(APP)
        })
        expect(reply.status).toBe(204)
        expect(reply.headers["access-control-allow-origin"]).toBe(APP)
        expect(reply.headers["access-control-allow-methods"]).toBe("POST")
        expect(reply.headers["vary"]).toBe("Origin")

        const answer = yield* rawRequest(baseUrl, {
          method: "POST",
          path: "/api/v1/chat/tokens/generate",
          headers: { origin: "http://localhost:3000" }
        })
        expect(answer.headers["access-control-allow-origin"]).toBe("http://localhost:3000")
        expect(answer.headers["access-control-expose-headers"]).toBe("x-request-id")
        expect(answer.headers["vary"]).toBe("Origin")
      })))

  it.scopedLive("with a list, another origin gets a 204 preflight and answers without CORS headers", () =>
    withEdge(APP, (baseUrl) =>
      Effect.gen(function*() {
        // `null` is what sandboxed frames and file pages send.
        for (const origin of [OTHER, "null", `${APP}.evil.example.net`, "http://app.example.com"]) {
          const reply = yield* rawRequest(baseUrl, {
            method: "OPTIONS",
            path: "/api/v1/chat/tokens/generate",
            headers: preflightHeaders(origin)
          })
          expect(reply.status).toBe(204)
          expect(corsOf(reply), origin).toEqual({})
          expect(reply.headers["vary"]).toBe("Origin")

          const answer = yield* rawRequest(baseUrl, {
            method: "POST",
            path: "/api/v1/chat/tokens/generate",
            headers: { origin }
          })
          // CORS only stops browsers from reading the answer; the request itself is served as any other.
          expect(answer.status).toBe(200)
          expect(corsOf(answer), origin).toEqual({})
          expect(answer.headers["vary"]).toBe("Origin")
        }
      })))
})

layer(TestNodeLive({ CORS_ALLOWED_ORIGINS: APP }), { excludeTestServices: true })("client API CORS on a node", (it) => {
  const send = (method: string, path: string, headers: Record<string, string>) =>
    Effect.flatMap(TestNode, ({ baseUrl }) => rawRequest(baseUrl, { method, path, headers }))

  it.effect("a preflight under the prefix is answered before authentication and every other rule", () =>
    Effect.gen(function*() {
      const reply = yield* send("OPTIONS", "/api/v1/chat/tokens/generate", {
        ...preflightHeaders(APP),
        accept: "text/html"
      })
      expect(reply.status).toBe(204)
      expect(reply.headers["access-control-allow-origin"]).toBe(APP)
      expect(reply.headers["access-control-allow-headers"]).toBe("Authorization, Content-Type")
      expect(reply.headers["access-control-allow-credentials"]).toBeUndefined()
      expect(reply.headers["x-request-id"]).toEqual(expect.any(String))
    }))

  it.effect("an error answer under the prefix, a 404 among them, is readable from an allowed origin", () =>
    Effect.gen(function*() {
      const reply = yield* send("GET", "/api/v1/chat/no/such/route", { origin: APP, "x-request-id": "cors-404" })
      expect(reply.status).toBe(404)
      expect(JSON.parse(reply.text)).toEqual(envelope("not_found"))
      expect(corsOf(reply)).toEqual({
        "access-control-allow-origin": APP,
        "access-control-expose-headers": "x-request-id"
      })
      expect(reply.headers["x-request-id"]).toBe("cors-404")
      // Whatever its case, as the router matches it.
      const shouted = yield* send("GET", "/API/V1/Chat/conversations", { origin: APP })
      expect(shouted.headers["access-control-allow-origin"]).toBe(APP)
    }))

  it.effect("routes outside the prefix get no CORS headers: tenant and admin APIs are server-to-server", () =>
    Effect.gen(function*() {
      for (const path of ["/api/v1/conversations", "/api/v1/admin/tenants", "/api/v1/chatter", "/health/live"]) {
        const answer = yield* send("GET", path, { origin: APP })
        expect(corsOf(answer), path).toEqual({})
        expect(answer.headers["vary"], path).toBeUndefined()
        const preflight = yield* send("OPTIONS", path, preflightHeaders(APP))
        expect(preflight.status, path).not.toBe(204)
        expect(corsOf(preflight), path).toEqual({})
      }
    }))
})
