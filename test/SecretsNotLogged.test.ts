import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { chat, generateToken } from "./support/ClientApi.js"
import { insertChannel, tenantApi } from "./support/Fixtures.js"
import { endOf, eventsOf, openStream } from "./support/SseClient.js"
import { ADMIN_TOKEN, createTenant, request, TestNodeLive } from "./support/TestNode.js"

const METHODS = ["log", "info", "warn", "error", "debug"] as const

/** Everything written through the console (where Effect's loggers write) while `effect` runs. */
const captureOutput = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const written: Array<string> = []
      const originals = METHODS.map((method) => [method, console[method]] as const)
      for (const method of METHODS) console[method] = (...args: Array<unknown>) => void written.push(args.map(String).join(" "))
      return { written, originals }
    }),
    ({ written }) => Effect.map(effect, () => written.join("\n")),
    ({ originals }) => Effect.sync(() => originals.forEach(([method, original]) => (console[method] = original)))
  )

layer(TestNodeLive({ LOG_LEVEL: "debug" }), { excludeTestServices: true })("logging", (it) => {
  it.effect("debug logs carry no API key, channel secret, admin token or token of a request", () =>
    Effect.gen(function*() {
      let secrets: Array<string> = []
      const output = yield* captureOutput(Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* insertChannel(tenant.id)
        const legacy = yield* request("POST", "/api/v1/conversations", {
          body: { metadata: {} },
          headers: { "x-channel-token": channel.secret }
        })
        const token = yield* request("POST", "/api/v1/tokens", {
          body: { conversation_id: legacy.body.data.id, user_id: "u-1" },
          headers: { "x-channel-token": channel.secret }
        })
        expect(legacy.status).toBe(201)
        expect(token.status).toBe(201)
        const posted = yield* tenantApi(tenant.api_key, "POST", `/conversations/${legacy.body.data.id}/activities`, { text: "hi" })
        expect(posted.status).toBe(201)
        yield* tenantApi(tenant.api_key, "GET", "/conversations/not-a-uuid")
        yield* tenantApi(`${tenant.api_key}x`, "GET", "/conversations")
        secrets = [tenant.api_key, channel.secret, ADMIN_TOKEN, token.body.token]
      }))
      // One access line per request, from the edge and from the lean append route alike.
      expect(output).toMatch(/http request[^\n]*"route":"\/api\/v1\/conversations\/:id"/)
      expect(output).toMatch(/http request(?=[^\n]*"route":"\/api\/v1\/conversations\/:id\/activities")(?=[^\n]*"status":201)/)
      for (const secret of secrets) expect(output).not.toContain(secret)
    }))

  it.effect("a flood of refused channel tokens logs no deprecation warning, refusals before any route included", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id)
      const conversation = `/api/v1/conversations/${crypto.randomUUID()}`
      const output = yield* captureOutput(Effect.forEach(Array.from({ length: 30 }, (_, i) => i), (i) =>
        Effect.gen(function*() {
          const bad = yield* request("GET", conversation, { headers: { "x-channel-token": `cs_bad${i}` } })
          expect(bad.status).toBe(401)
          // Marked deprecated all the same (client-api.md "Versioning").
          expect(bad.headers.get("deprecation")).not.toBeNull()
          const legacy = yield* request("POST", "/api/v1/conversations", { body: {}, headers: { "x-channel-token": `cs_bad${i}` } })
          expect(legacy.status).toBe(401)
          // A good token refused before any route (406) was never authenticated.
          yield* request("GET", conversation, { headers: { "x-channel-token": channel.secret, accept: "text/html" } })
        }), { concurrency: 5, discard: true }))
      expect(output).not.toContain("deprecated API used")
    }))

  it.effect("authenticated uses of a deprecated surface log one warning a minute per channel, naming it and the request", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const [first, second] = [yield* insertChannel(tenant.id), yield* insertChannel(tenant.id)]
      const output = yield* captureOutput(Effect.gen(function*() {
        const created = yield* request("POST", "/api/v1/conversations", {
          body: {},
          headers: { "x-channel-token": first.secret, "x-request-id": "deprecated-1" }
        })
        expect(created.status).toBe(201)
        yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => i), (i) =>
          Effect.gen(function*() {
            const reply = yield* request("GET", `/api/v1/conversations/${created.body.data.id}`, {
              headers: { "x-channel-token": first.secret, "x-request-id": `deprecated-again-${i}` }
            })
            expect(reply.status).toBe(200)
          }), { concurrency: 5, discard: true })
        const other = yield* request("POST", "/api/v1/conversations", {
          body: {},
          headers: { "x-channel-token": second.secret, "x-request-id": "deprecated-2" }
        })
        expect(other.status).toBe(201)
      }))
      const warnings = output.split("\n").filter((line) => line.includes("deprecated API used"))
      expect(warnings).toHaveLength(2)
      expect(warnings[0]).toMatch(
        new RegExp(`(?=.*"surface":"POST /api/v1/conversations")(?=.*"channel_id":"${first.id}")(?=.*"request_id":"deprecated-1")`)
      )
      expect(warnings[1]).toMatch(new RegExp(`(?=.*"channel_id":"${second.id}")(?=.*"request_id":"deprecated-2")`))
    }))

  it.scoped("a ?token= of the event stream appears in no log line, whether the stream opens or is refused", () =>
    Effect.gen(function*() {
      let secrets: Array<string> = []
      const output = yield* captureOutput(Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* insertChannel(tenant.id)
        const parent = yield* generateToken(channel.secret, { user: { id: "u-1" } })
        const created = yield* chat("POST", "/conversations", { bearer: parent })
        expect(created.status).toBe(201)
        const { conversationId, token } = created.body as { conversationId: string; token: string }
        const path = `/api/v1/chat/conversations/${conversationId}/events`
        const open = yield* openStream(`${path}?token=${token}&watermark=0`)
        yield* eventsOf(open, (e) => e.event === "heartbeat", 1, "a heartbeat").pipe(Effect.timeout("1 second"), Effect.ignore)
        expect(open.status).toBe(200)
        open.response.destroy()
        const wrongConversation = yield* openStream(`/api/v1/chat/conversations/${crypto.randomUUID()}/events?token=${token}`)
        yield* endOf(wrongConversation)
        expect(wrongConversation.status).toBe(403)
        const forged = `${token.slice(0, -4)}AAAA`
        const refused = yield* openStream(`${path}?token=${forged}`)
        yield* endOf(refused)
        expect(refused.status).toBe(401)
        secrets = [token, forged, parent]
      }))
      expect(output).toMatch(/http request[^\n]*"route":"\/api\/v1\/chat\/conversations\/:conversation_id\/events"/)
      for (const secret of secrets) expect(output).not.toContain(secret)
      // Nor any part of one: the signature is what a leak would give away.
      for (const secret of secrets) expect(output).not.toContain(secret.split(".")[2]!)
    }))
})
