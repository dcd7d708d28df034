import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SignJWT } from "jose"
import { chat, generateToken, tenantWithChannel } from "./support/ClientApi.js"
import { insertChannel, storedState } from "./support/Fixtures.js"
import { eventually } from "./support/Eventually.js"
import { query } from "./support/TestDatabase.js"
import { TestNodeLive } from "./support/TestNode.js"

const SIGNING_KEY = "client-isolation-test-signing-key-012345"

const BOUNDARY = "isolation-boundary"

/** An upload form of a text file (a type every tenant accepts) whose content and name carry `marker`. */
const uploadForm = (marker: string) => ({
  raw: [
    `--${BOUNDARY}`,
    `Content-Disposition: form-data; name="file"; filename="name-${marker}.txt"`,
    "Content-Type: text/plain",
    "",
    `file-${marker}`,
    `--${BOUNDARY}--`,
    ""
  ].join("\r\n"),
  headers: { "content-type": `multipart/form-data; boundary=${BOUNDARY}` }
})

/** Every conversation route of the client API, on conversation `id` and attachment `fileId`, with the permission it needs. */
const routes = (id: string, fileId: string, form: ReturnType<typeof uploadForm>) =>
  [
    { name: "create", method: "POST", path: "/conversations", body: { title: "new" }, needs: "write", ok: 201 },
    { name: "list", method: "GET", path: "/conversations", needs: "read", ok: 200 },
    { name: "reconnect", method: "GET", path: `/conversations/${id}`, needs: "read" },
    { name: "close", method: "POST", path: `/conversations/${id}/close`, needs: "write" },
    { name: "reopen", method: "POST", path: `/conversations/${id}/reopen`, needs: "write" },
    { name: "post", method: "POST", path: `/conversations/${id}/activities`, body: { text: "intruder" }, needs: "write" },
    { name: "read", method: "GET", path: `/conversations/${id}/activities?format=frames`, needs: "read" },
    { name: "upload", method: "POST", path: `/conversations/${id}/upload`, form, needs: "write" },
    // A file of another conversation is 404 like an unknown one, even for a bound token (api-notes.md "Uploads").
    { name: "download", method: "GET", path: `/attachments/${fileId}`, needs: "read", hidden: true }
  ] as const
type Route = ReturnType<typeof routes>[number]

/** What a credential must get on a route: a status, and the code of its envelope (none for a success). */
type Expected = readonly [status: number, code?: string]

const now = () => Math.floor(Date.now() / 1000)

const sign = (claims: Record<string, unknown>, key = SIGNING_KEY) =>
  Effect.promise(() => new SignJWT(claims).setProtectedHeader({ alg: "HS256", typ: "JWT" }).sign(new TextEncoder().encode(key)))

layer(TestNodeLive({ TOKEN_SIGNING_KEY: SIGNING_KEY, TRUSTED_PROXIES: "127.0.0.1/32" }), { excludeTestServices: true })(
  "client API isolation",
  (it) => {
    it.effect("every credential of another party, on every conversation and upload route: the documented 401/403/404, none of the victim's data, nothing stored (no activity, no file)", () =>
      Effect.gen(function*() {
        // The victim: a conversation with a titled, identified user and a message.
        const victim = yield* tenantWithChannel
        const marker = crypto.randomUUID()
        const victimToken = yield* generateToken(victim.channel.secret, { user: { id: `victim-${marker}` } })
        const created = yield* chat("POST", "/conversations", { bearer: victimToken, body: { title: `title-${marker}` } })
        const id = created.body.conversationId as string
        const bound = created.body.token as string
        expect((yield* chat("POST", `/conversations/${id}/activities`, { bearer: bound, body: { text: `text-${marker}` } })).status).toBe(200)
        const form = uploadForm(marker)
        const uploaded = yield* chat("POST", `/conversations/${id}/upload`, { bearer: bound, ...form })
        expect(uploaded.status).toBe(201)
        const fileId = (uploaded.body.attachment.contentUrl as string).split("/").pop()!

        const intruder = yield* tenantWithChannel
        /** The conversation's rows and every file of the two tenants. */
        const stored = Effect.all({
          conversation: storedState(id),
          blobs: query<{ count: number }>(
            "SELECT count(*)::int AS count FROM blobs WHERE conversation_id = $1 OR tenant_id IN ($2, $3)",
            [id, victim.tenant.id, intruder.tenant.id]
          )
        })
        const before = yield* stored

        const sibling = yield* insertChannel(victim.tenant.id)
        const neighbour = yield* generateToken(victim.channel.secret, { user: { id: "neighbour" } })
        const neighbourBound = (yield* chat("POST", "/conversations", { bearer: neighbour })).body.token as string
        const revoked = yield* generateToken(victim.channel.secret, { scope: "channel" })
        expect((yield* chat("POST", "/tokens/revoke", { bearer: revoked })).status).toBe(200)
        yield* eventually(chat("GET", "/conversations", { bearer: revoked }), (reply) => reply.status === 401, { within: "5 seconds" })
        const expired = yield* sign({
          tid: victim.tenant.id,
          cid: victim.channel.id,
          fam: crypto.randomUUID(),
          jti: crypto.randomUUID(),
          scope: "channel",
          iat: now() - 120,
          exp: now() - 60
        })
        const wrongKey = yield* sign(
          { tid: victim.tenant.id, cid: victim.channel.id, fam: crypto.randomUUID(), jti: crypto.randomUUID(), scope: "channel", iat: now(), exp: now() + 600 },
          "another-signing-key-0123456789abcdef0123"
        )
        // One token per credential, not per route: token_generate is rate limited per channel.
        const intruderToken = yield* generateToken(intruder.channel.secret, { scope: "channel" })
        const siblingToken = yield* generateToken(sibling.secret, { scope: "channel" })
        /** Tokens of the victim's channel holding every permission but the one named. */
        const lacking = {
          read: yield* generateToken(victim.channel.secret, { scope: "channel", permissions: ["write", "typing"] }),
          write: yield* generateToken(victim.channel.secret, { scope: "channel", permissions: ["read", "typing"] })
        }

        const own = (route: Route): Expected => [route.name === "create" ? 201 : 200]
        const credentials: ReadonlyArray<{
          readonly name: string
          readonly token: (route: Route) => string | undefined
          readonly expect: (route: Route) => Expected
        }> = [
          {
            name: "another tenant's channel-scoped token",
            token: () => intruderToken,
            expect: (route) => "ok" in route ? own(route) : [404, "not_found"]
          },
          {
            name: "another channel's channel-scoped token",
            token: () => siblingToken,
            expect: (route) => "ok" in route ? own(route) : [404, "not_found"]
          },
          {
            name: "a token bound to another conversation",
            token: () => neighbourBound,
            expect: (route) => "hidden" in route ? [404, "not_found"] : [403, "forbidden"]
          },
          { name: "a token lacking the permission", token: (route) => lacking[route.needs], expect: () => [403, "insufficient_permission"] },
          { name: "an expired token", token: () => expired, expect: () => [401, "token_expired"] },
          { name: "a revoked token", token: () => revoked, expect: () => [401, "token_revoked"] },
          { name: "a token signed with another key", token: () => wrongKey, expect: () => [401, "unauthorized"] },
          { name: "the channel secret", token: () => victim.channel.secret, expect: () => [401, "unauthorized"] },
          { name: "no credential", token: () => undefined, expect: () => [401, "unauthorized"] }
        ]

        for (const credential of credentials) {
          for (const route of routes(id, fileId, form)) {
            const label = `${credential.name} on ${route.name}`
            const token = credential.token(route)
            const reply = yield* chat(route.method, route.path, {
              ...(token === undefined ? {} : { bearer: token }),
              ...("body" in route ? { body: route.body } : {}),
              ...("form" in route ? route.form : {})
            })
            const [status, code] = credential.expect(route)
            expect({ status: reply.status, code: reply.body?.error?.code }, label).toEqual({ status, code })
            const text = JSON.stringify(reply.body)
            for (const secret of [marker, victim.channel.secret, victimToken, bound]) expect(text.includes(secret), label).toBe(false)
            if (route.name === "list" && status === 200) expect(reply.body.conversations.map((c: any) => c.id), label).not.toContain(id)
          }
        }
        expect(yield* stored).toEqual(before)
      }))
  }
)
