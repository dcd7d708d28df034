import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Option, Redacted } from "effect"
import { createHmac, timingSafeEqual } from "node:crypto"
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { createServer as createTlsServer } from "node:tls"
import { AppConfig } from "../src/config/AppConfig.js"
import { AddressGuard } from "../src/delivery/AddressGuard.js"
import { HostResolver } from "../src/delivery/HostResolver.js"
import type { DeliveryOutcome } from "../src/delivery/WebhookOutcome.js"
import { type WebhookDelivery, WebhookSender } from "../src/delivery/WebhookSender.js"
import { DEFAULT_RETRY_POLICY, type JsonObject } from "../src/domain/Channel.js"
import { eventually } from "./support/Eventually.js"

const SECRET = "cs_0123456789abcdefghijABCDEFGHIJ0123456789"

/**
 * A receiver's check of `x-chat-signature`, written from server-apis.md alone (not from the sender):
 * parts split on `,` and trimmed, `t` an integer, any `v1` may match, 300 s tolerance inclusive.
 */
const verify = (header: string | undefined, rawBody: Buffer, secret: string, nowSeconds: number) => {
  if (header === undefined || header === "") return "missing_signature"
  if (header.startsWith("sha256=")) return "missing_signature"
  let t: number | undefined
  const v1: Array<string> = []
  for (const part of header.split(",")) {
    const [key, ...rest] = part.trim().split("=")
    const value = rest.join("=")
    if (key === "t") t = /^[+-]?\d+$/.test(value) ? Number(value) : Number.NaN
    else if (key === "v1") v1.push(value)
  }
  if (t === undefined || Number.isNaN(t) || v1.length === 0) return "malformed_signature"
  if (Math.abs(nowSeconds - t) > 300) return "timestamp_out_of_tolerance"
  const expected = Buffer.from(createHmac("sha256", secret).update(`${t}.`).update(rawBody).digest("hex"))
  const ok = v1.some((sent) => {
    const given = Buffer.from(sent)
    return given.length === expected.length && timingSafeEqual(given, expected)
  })
  return ok ? "ok" : "invalid_signature"
}

interface Received {
  readonly method: string
  readonly url: string
  readonly headers: IncomingHttpHeaders
  readonly body: Buffer
}

type Handler = (request: IncomingMessage, response: ServerResponse, index: number) => void

/** A real HTTP receiver on `host` (port 0: any free one) that records every request it gets. */
const receiver = (handler: Handler, host = "127.0.0.1", port = 0) =>
  Effect.acquireRelease(
    Effect.async<{
      readonly port: number
      readonly received: Array<Received>
      readonly sockets: () => number
      readonly connections: () => number
      readonly close: () => void
    }>(
      (resume) => {
        const received: Array<Received> = []
        let open = 0
        let opened = 0
        const server = createServer((request, response) => {
          const chunks: Array<Buffer> = []
          request.on("data", (chunk: Buffer) => chunks.push(chunk))
          request.on("end", () => {
            received.push({
              method: request.method ?? "",
              url: request.url ?? "",
              headers: request.headers,
              body: Buffer.concat(chunks)
            })
            handler(request, response, received.length)
          })
        })
        server.on("connection", (socket) => {
          open += 1
          opened += 1
          socket.on("close", () => (open -= 1))
        })
        server.once("error", (error) => resume(Effect.die(error)))
        server.listen(port, host, () =>
          resume(Effect.succeed({
            port: (server.address() as AddressInfo).port,
            received,
            sockets: () => open,
            connections: () => opened,
            close: () => {
              server.closeAllConnections()
              server.close()
            }
          })))
      }
    ),
    ({ close }) => Effect.sync(close)
  )

const answer = (status: number, body = "", headers: Record<string, string> = {}): Handler => (_request, response) => {
  response.writeHead(status, headers)
  response.end(body)
}

/** Names the tests resolve (every other name does not resolve); `rebind.test` answers differently after its first lookup. */
const resolverWith = (lookups: Array<string>) =>
  Layer.succeed(
    HostResolver,
    HostResolver.make({
      resolve: (host) =>
        Effect.sync(() => {
          lookups.push(host)
          if (host === "rebind.test") return lookups.filter((h) => h === host).length === 1 ? ["127.0.0.2"] : ["127.0.0.1"]
          if (host === "localhost") return ["127.0.0.2"]
          if (host === "hooks.test" || host === "internal.test") return ["127.0.0.1"]
          return []
        })
    })
  )

/** The sender under `WEBHOOK_ALLOWED_HOSTS=allowed`; `lookups` records every name the resolver is asked. */
const senderWith = (allowed: string, lookups: Array<string> = []) =>
  WebhookSender.Default.pipe(
    Layer.provide(AddressGuard.DefaultWithoutDependencies),
    Layer.provide([
      AppConfig.Default.pipe(
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["WEBHOOK_ALLOWED_HOSTS", allowed]]))))
      ),
      resolverWith(lookups)
    ])
  )

const PAYLOAD = { id: "3f1c2b9e-0000-4000-8000-000000000001", type: "message", text: "héllo", metadata: { n: 1 } }

const delivery = (config: JsonObject, deliveryId = "7d0c6e3a-1111-4000-8000-000000000002"): WebhookDelivery => ({
  deliveryId,
  payload: PAYLOAD,
  config,
  retryPolicy: { ...DEFAULT_RETRY_POLICY, timeout_ms: 10_000 },
  secret: Option.some(Redacted.make(SECRET))
})

const send = (d: WebhookDelivery, allowed = "hooks.test", lookups?: Array<string>) =>
  Effect.flatMap(WebhookSender, (sender) => sender.send(d)).pipe(Effect.provide(senderWith(allowed, lookups)))

const tag = (outcome: DeliveryOutcome) => outcome._tag

// Live clock: the signature carries the wall-clock time a receiver checks within 300 s.
describe("WebhookSender", () => {
  it.scopedLive("sends the exact request of the spec, signed over the raw body, with the config headers", () =>
    Effect.gen(function*() {
      const hook = yield* receiver(answer(200, `{"id":"prov-77"}`, { "content-type": "application/json" }))
      const outcome = yield* send(delivery({
        url: `http://hooks.test:${hook.port}/in/hook?x=1`,
        method: "POST",
        headers: { "X-Tenant-Tag": "blue", authorization: "Bearer t0k", "Content-Type": "text/plain", "X-Chat-Event": "forged" }
      }))
      expect(outcome).toEqual({ _tag: "Delivered", status: 200, providerMessageId: "prov-77" })
      expect(hook.received).toHaveLength(1)
      const [request] = hook.received
      expect(request!.method).toBe("POST")
      expect(request!.url).toBe("/in/hook?x=1")
      expect(request!.headers["host"]).toBe(`hooks.test:${hook.port}`)
      expect(request!.headers["content-type"]).toBe("application/json")
      expect(request!.headers["x-chat-event"]).toBe("activity.created")
      expect(request!.headers["x-chat-delivery-id"]).toBe("7d0c6e3a-1111-4000-8000-000000000002")
      expect(request!.headers["x-tenant-tag"]).toBe("blue")
      expect(request!.headers["authorization"]).toBe("Bearer t0k")
      expect(JSON.parse(request!.body.toString("utf8"))).toEqual(PAYLOAD)
      const signature = request!.headers["x-chat-signature"] as string
      expect(signature).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/)
      const now = Math.floor(Date.now() / 1000)
      expect(verify(signature, request!.body, SECRET, now)).toBe("ok")
      // The verifier can say no: another secret, another body, another time.
      expect(verify(signature, request!.body, `${SECRET}x`, now)).toBe("invalid_signature")
      expect(verify(signature, Buffer.concat([request!.body, Buffer.from(" ")]), SECRET, now)).toBe("invalid_signature")
      expect(verify(signature, request!.body, SECRET, now + 301)).toBe("timestamp_out_of_tolerance")
    }))

  it.scopedLive("connections are kept alive for reuse and closed when the sender shuts down", () =>
    Effect.gen(function*() {
      const hook = yield* receiver(answer(200))
      const d = delivery({ url: `http://hooks.test:${hook.port}/` })
      yield* Effect.gen(function*() {
        const sender = yield* WebhookSender
        for (let i = 0; i < 8; i++) expect(tag(yield* sender.send(d))).toBe("Delivered")
        expect(hook.connections()).toBeLessThan(8)
        expect(hook.sockets()).toBeGreaterThan(0)
      }).pipe(Effect.provide(senderWith("hooks.test")))
      yield* eventually(Effect.sync(hook.sockets), (open) => open === 0, { what: "open connections" })
      expect(hook.received).toHaveLength(8)
    }))

  it.scopedLive("PUT and PATCH as configured; any other method is permanent and sends nothing", () =>
    Effect.gen(function*() {
      const hook = yield* receiver(answer(204))
      const url = `http://hooks.test:${hook.port}/`
      expect(tag(yield* send(delivery({ url, method: "PUT" })))).toBe("Delivered")
      expect(tag(yield* send(delivery({ url, method: "patch" })))).toBe("Delivered")
      expect(hook.received.map((r) => r.method)).toEqual(["PUT", "PATCH"])
      const refused = yield* send(delivery({ url, method: "GET" }))
      expect(refused).toEqual({ _tag: "Permanent", error: "invalid method GET", status: null })
      expect(hook.received).toHaveLength(2)
    }))

  it.scopedLive("a channel without a sealed secret cannot be signed: permanent, nothing sent", () =>
    Effect.gen(function*() {
      const hook = yield* receiver(answer(200))
      const unsigned = { ...delivery({ url: `http://hooks.test:${hook.port}/` }), secret: Option.none() }
      expect(yield* send(unsigned)).toEqual({
        _tag: "Permanent",
        error: "no signing secret: rotate the channel secret",
        status: null
      })
      expect(hook.received).toHaveLength(0)
    }))

  it.scopedLive("a receiver that is down is a retried transport error", () =>
    Effect.gen(function*() {
      const gone = yield* receiver(answer(200))
      gone.close()
      const outcome = yield* send(delivery({ url: `http://hooks.test:${gone.port}/` }))
      expect(outcome._tag).toBe("Retryable")
      expect(outcome._tag === "Retryable" && outcome.error).toContain("ECONNREFUSED")
    }))

  it.scopedLive("a receiver slower than receive_timeout is a retried timeout", () =>
    Effect.gen(function*() {
      const slow = yield* receiver((_request, response) => {
        setTimeout(() => response.end("late"), 20_000).unref()
      })
      const outcome = yield* send(delivery({ url: `http://hooks.test:${slow.port}/`, receive_timeout: 300 }))
      expect(outcome).toEqual({ _tag: "Retryable", error: "receive timeout", status: null, retryAfterMs: null })
    }))

  it.scopedLive("500 then 200: retried, then delivered, with the same delivery id both times", () =>
    Effect.gen(function*() {
      const flaky = yield* receiver((_request, response, index) => {
        response.writeHead(index === 1 ? 500 : 200)
        response.end()
      })
      const d = delivery({ url: `http://hooks.test:${flaky.port}/` })
      expect(yield* send(d)).toEqual({ _tag: "Retryable", error: "HTTP 500", status: 500, retryAfterMs: null })
      expect(yield* send(d)).toEqual({ _tag: "Delivered", status: 200, providerMessageId: null })
      expect(flaky.received.map((r) => r.headers["x-chat-delivery-id"])).toEqual([d.deliveryId, d.deliveryId])
    }))

  it.scopedLive("429 carries Retry-After; 410 is permanent", () =>
    Effect.gen(function*() {
      const busy = yield* receiver(answer(429, "", { "retry-after": "42" }))
      expect(yield* send(delivery({ url: `http://hooks.test:${busy.port}/` }))).toEqual({
        _tag: "Retryable",
        error: "HTTP 429",
        status: 429,
        retryAfterMs: 42_000
      })
      const gone = yield* receiver(answer(410))
      expect(yield* send(delivery({ url: `http://hooks.test:${gone.port}/` }))).toEqual({
        _tag: "Permanent",
        error: "HTTP 410",
        status: 410
      })
    }))

  it.scopedLive("a redirect is not followed: permanent, and its target gets nothing", () =>
    Effect.gen(function*() {
      const target = yield* receiver(answer(200))
      const redirecting = yield* receiver(answer(307, "", { location: `http://127.0.0.1:${target.port}/elsewhere` }))
      const outcome = yield* send(delivery({ url: `http://hooks.test:${redirecting.port}/` }), "hooks.test,127.0.0.1")
      expect(outcome).toEqual({ _tag: "Permanent", error: "HTTP 307 (redirects are not followed)", status: 307 })
      expect(redirecting.received).toHaveLength(1)
      expect(target.received).toHaveLength(0)
    }))

  it.scopedLive("reading an oversized body stops at max_response_bytes", () =>
    Effect.gen(function*() {
      let closed = false
      // An endless body: only a reader that stops lets the attempt end before its timeout.
      const endless = yield* receiver((_request, response) => {
        response.writeHead(200, { "content-type": "application/json" })
        const chunk = Buffer.alloc(16_384, "a")
        const pump = () => {
          while (!closed && response.write(chunk)) { /* until the socket pushes back */ }
        }
        response.on("drain", pump)
        response.on("close", () => (closed = true))
        pump()
      })
      const outcome = yield* send(delivery({
        url: `http://hooks.test:${endless.port}/`,
        max_response_bytes: 1000,
        // A reader that kept going would end at this timeout instead, as Retryable.
        receive_timeout: 20_000
      }))
      expect(outcome).toEqual({ _tag: "Delivered", status: 200, providerMessageId: null })
    }))

  it.scopedLive("a host that resolves to 127.0.0.1 is refused (permanent) unless WEBHOOK_ALLOWED_HOSTS allows it", () =>
    Effect.gen(function*() {
      const hook = yield* receiver(answer(200))
      const d = delivery({ url: `http://internal.test:${hook.port}/` })
      expect(yield* send(d, "hooks.test")).toEqual({
        _tag: "Permanent",
        error: "address guard: url resolves to a non-public address",
        status: null
      })
      expect(hook.received).toHaveLength(0)
      expect(tag(yield* send(d, "internal.test"))).toBe("Delivered")
      expect(tag(yield* send(d, "127.0.0.0/8"))).toBe("Delivered")
      expect(hook.received).toHaveLength(2)
    }))

  it.scopedLive("a host that does not resolve is retried", () =>
    Effect.gen(function*() {
      const outcome = yield* send(delivery({ url: "http://nowhere.test/" }))
      expect(outcome).toEqual({ _tag: "Retryable", error: "host did not resolve", status: null, retryAfterMs: null })
    }))

  it.scopedLive("the connection is pinned: a lookup that changes after the check cannot redirect it", () =>
    Effect.gen(function*() {
      // The checked address (allowed by IP) and, on the same port, the internal one DNS rebinds to.
      // 127.0.0.1 first: its ports are the busy ones on a shared host.
      const internal = yield* receiver(answer(200), "127.0.0.1")
      const checked = yield* receiver(answer(200), "127.0.0.2", internal.port)
      const lookups: Array<string> = []
      const d = delivery({ url: `http://rebind.test:${checked.port}/` })
      expect(tag(yield* send(d, "127.0.0.2", lookups))).toBe("Delivered")
      // One lookup (the guard's); the socket went to the address it checked, with the original Host.
      expect(lookups).toEqual(["rebind.test"])
      expect(checked.received.map((r) => r.headers["host"])).toEqual([`rebind.test:${checked.port}`])
      expect(internal.received).toHaveLength(0)
      // The next attempt checks again and sees the rebound address: refused, not sent.
      expect(tag(yield* send(d, "127.0.0.2", lookups))).toBe("Permanent")
      expect(internal.received).toHaveLength(0)
    }))

  it.scopedLive("https: pinned to the checked address, with the original name as TLS server name", () =>
    Effect.gen(function*() {
      // No certificate to offer: the handshake fails after the ClientHello has named the server.
      const names: Array<string> = []
      const tls = yield* Effect.acquireRelease(
        Effect.async<{ readonly port: number; readonly close: () => void }>((resume) => {
          const server = createTlsServer({
            SNICallback: (name, callback) => {
              names.push(name)
              callback(new Error("no certificate here"), undefined)
            }
          })
          server.on("tlsClientError", () => undefined)
          server.listen(0, "127.0.0.2", () =>
            resume(Effect.succeed({ port: (server.address() as AddressInfo).port, close: () => server.close() })))
        }),
        ({ close }) => Effect.sync(close)
      )
      const outcome = yield* send(delivery({ url: `https://rebind.test:${tls.port}/` }), "127.0.0.2")
      expect(outcome._tag).toBe("Retryable")
      expect(names).toEqual(["rebind.test"])
    }))

  it.scopedLive("pinned against the system's own answer: `localhost` checked as 127.0.0.2 never reaches 127.0.0.1", () =>
    Effect.gen(function*() {
      // The test resolver says 127.0.0.2; the operating system (what an unpinned client would ask
      // when connecting) says 127.0.0.1, where the other receiver listens.
      // 127.0.0.1 first: its ports are the busy ones on a shared host.
      const internal = yield* receiver(answer(200), "127.0.0.1")
      const checked = yield* receiver(answer(200), "127.0.0.2", internal.port)
      expect(tag(yield* send(delivery({ url: `http://localhost:${checked.port}/` }), "localhost"))).toBe("Delivered")
      expect(checked.received).toHaveLength(1)
      expect(internal.received).toHaveLength(0)
    }))
})
