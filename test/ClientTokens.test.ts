import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SignJWT } from "jose"
import { expectError } from "./support/Envelope.js"
import { claimsOf, chat, createPublishableKey, generateToken, ORIGIN, randomIp, tenantWithChannel } from "./support/ClientApi.js"
import { eventually } from "./support/Eventually.js"
import { insertChannel } from "./support/Fixtures.js"
import { query } from "./support/TestDatabase.js"
import { createTenant, manage, TestNodeLive } from "./support/TestNode.js"

const SIGNING_KEY = "client-tokens-test-signing-key-0123456789"
const GRACE_SECONDS = 2

const now = () => Math.floor(Date.now() / 1000)

/** A token signed with `key` outside the node, for shapes the node never issues. */
const forge = (claims: Record<string, unknown>, options: { readonly key?: string; readonly alg?: string; readonly typ?: string } = {}) =>
  Effect.promise(() =>
    new SignJWT(claims)
      .setProtectedHeader({ alg: options.alg ?? "HS256", typ: options.typ ?? "JWT" })
      .sign(new TextEncoder().encode(options.key ?? SIGNING_KEY))
  )

const validClaims = (channel: { readonly id: string }, tenantId: string) => ({
  tid: tenantId,
  cid: channel.id,
  fam: crypto.randomUUID(),
  jti: crypto.randomUUID(),
  iat: now(),
  exp: now() + 600
})

const refresh = (token: string) => chat("POST", "/tokens/refresh", { bearer: token })
const revoke = (bearer: string, body?: unknown) => chat("POST", "/tokens/revoke", { bearer, ...(body === undefined ? {} : { body }) })
const publishable = (key: string | undefined, options: { readonly origin?: string | null; readonly body?: unknown; readonly ip?: string } = {}) =>
  chat("POST", "/tokens/publishable", {
    ...(key === undefined ? {} : { bearer: key }),
    ...(options.body === undefined ? {} : { body: options.body }),
    headers: {
      "x-forwarded-for": options.ip ?? randomIp(),
      ...(options.origin === null ? {} : { origin: options.origin ?? ORIGIN })
    }
  })

const deactivateChannel = (id: string) => query("UPDATE channels SET status = 'inactive' WHERE id = $1", [id])

/** Whether a token is accepted now: refresh answers 200 (it counts in the channel's bucket). */
const accepted = (token: string) => Effect.map(refresh(token), (reply) => reply.status)

layer(
  TestNodeLive({
    TRUSTED_PROXIES: "127.0.0.1/32",
    TOKEN_SIGNING_KEY: SIGNING_KEY,
    TOKEN_ROTATION_GRACE_SECONDS: String(GRACE_SECONDS),
    TOKEN_TTL_SECONDS: "900",
    PUBLISHABLE_RESUME_TTL_SECONDS: "120",
    RATE_LIMITS: JSON.stringify({
      token_generate: { limit: 8, scale_ms: 60000 },
      publishable_token_ip: { limit: 3, scale_ms: 60000 },
      publishable_token: { limit: 6, scale_ms: 60000 }
    })
  }),
  { excludeTestServices: true }
)("client API tokens", (it) => {
  describe("POST /tokens/generate", () => {
    it.effect("an unscoped token of the secret's channel, valid TOKEN_TTL_SECONDS, all permissions", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const reply = yield* chat("POST", "/tokens/generate", { bearer: channel.secret, body: { user: { id: "user-1" } } })
        expect(reply.status).toBe(200)
        expect(reply.body).toEqual({ conversationId: null, token: expect.any(String), expires_in: 900, permissions: null })
        const claims = claimsOf(reply.body.token)
        expect(claims).toMatchObject({ tid: tenant.id, cid: channel.id, user_id: "user-1", sub: "user-1" })
        expect(claims["exp"]).toBe((claims["iat"] as number) + 900)
        for (const absent of ["conversation_id", "scope", "perms", "src"]) expect(claims).not.toHaveProperty(absent)
      }))

    it.effect("scope=channel and a permission subset are carried and echoed; no body at all takes the defaults", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const scoped = yield* chat("POST", "/tokens/generate", { bearer: channel.secret, body: { scope: "channel", permissions: ["read", "read"] } })
        expect(scoped.status).toBe(200)
        expect(scoped.body.permissions).toEqual(["read"])
        expect(claimsOf(scoped.body.token)).toMatchObject({ scope: "channel", perms: ["read"] })
        const bare = yield* chat("POST", "/tokens/generate", { bearer: channel.secret })
        expect(bare.status).toBe(200)
        expect(claimsOf(bare.body.token)).not.toHaveProperty("user_id")
      }))

    it.effect("400 for a token instead of the secret, an unknown scope, permissions not a non-empty list of known ones", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const token = yield* generateToken(channel.secret)
        expectError(yield* chat("POST", "/tokens/generate", { bearer: token }), 400, "bad_request")
        for (const body of [{ scope: "tenant" }, { permissions: [] }, { permissions: ["admin"] }, { permissions: "read" }, { user: { id: "" } }, { user: { id: "a\u0000b" } }]) {
          expectError(yield* chat("POST", "/tokens/generate", { bearer: channel.secret, body }), 400, "bad_request", null, JSON.stringify(body))
        }
      }))

    it.effect("401 without a Bearer header, for an unknown secret, and for an inactive channel", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        expectError(yield* chat("POST", "/tokens/generate", {}), 401, "unauthorized")
        expectError(yield* chat("POST", "/tokens/generate", { headers: { authorization: channel.secret } }), 401, "unauthorized")
        expectError(yield* chat("POST", "/tokens/generate", { bearer: `cs_${"x".repeat(40)}` }), 401, "unauthorized")
        yield* deactivateChannel(channel.id)
        expectError(yield* chat("POST", "/tokens/generate", { bearer: channel.secret }), 401, "unauthorized")
      }))

    it.effect("429 once the channel's token_generate bucket is full; another channel is not affected", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        for (let i = 0; i < 8; i++) yield* generateToken(channel.secret)
        const limited = yield* chat("POST", "/tokens/generate", { bearer: channel.secret })
        expectError(limited, 429, "rate_limited", { retry_after_ms: expect.any(Number) })
        const other = yield* insertChannel(tenant.id)
        yield* generateToken(other.secret)
      }))
  })

  describe("POST /tokens/refresh", () => {
    it.effect("a new token of the same grant and family, valid a whole TTL; the old one works within grace", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const old = yield* generateToken(channel.secret, { user: { id: "u" }, scope: "channel", permissions: ["read", "typing"] })
        const first = yield* refresh(old)
        expect(first.status).toBe(200)
        expect(first.body).toEqual({ conversationId: null, token: expect.any(String), expires_in: 900 })
        const before = claimsOf(old)
        const after = claimsOf(first.body.token)
        for (const kept of ["tid", "cid", "fam", "user_id", "scope", "perms"]) expect(after[kept], kept).toEqual(before[kept])
        expect(after["jti"]).not.toBe(before["jti"])
        // Within grace: refreshing the old token again gives another new token.
        const second = yield* refresh(old)
        expect(second.status).toBe(200)
        expect(second.body.token).not.toBe(first.body.token)
        expect(claimsOf(second.body.token)["perms"]).toEqual(["read", "typing"])
      }))

    it.effect("past grace the old token is revoked, and refreshing it revokes the whole family (theft)", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const old = yield* generateToken(channel.secret, { user: { id: "u" } })
        const fresh = (yield* refresh(old)).body.token as string
        yield* Effect.sleep(`${GRACE_SECONDS * 1000 + 300} millis`)
        expectError(yield* revoke(old), 401, "token_revoked")
        expect(yield* accepted(fresh)).toBe(200)
        expectError(yield* refresh(old), 401, "token_revoked")
        // Every token of the family now, the newest included.
        const newest = claimsOf(fresh)
        expect(newest["fam"]).toBe(claimsOf(old)["fam"])
        expectError(yield* refresh(fresh), 401, "token_revoked")
      }))

    it.effect("401 token_expired for an expired token, 403 channel_inactive for a disabled channel", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const expired = yield* forge({ ...validClaims(channel, tenant.id), iat: now() - 100, exp: now() - 10 })
        expectError(yield* refresh(expired), 401, "token_expired")
        const token = yield* generateToken(channel.secret)
        yield* deactivateChannel(channel.id)
        expectError(yield* refresh(token), 403, "channel_inactive")
      }))

    it.effect("malformed tokens are 401 unauthorized: bad signature, alg none, wrong key, future iat, missing claims, a secret, a resume", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const claims = validClaims(channel, tenant.id)
        const good = yield* forge(claims)
        const [header, payload] = good.split(".")
        const tampered = `${header}.${Buffer.from(JSON.stringify({ ...claims, cid: crypto.randomUUID() })).toString("base64url")}.${good.split(".")[2]}`
        const none = `${Buffer.from(JSON.stringify({ alg: "none", typ: "JWT" })).toString("base64url")}.${payload}.`
        const { fam: _fam, ...withoutFamily } = claims
        const key = yield* createPublishableKey(tenant.api_key, channel.id)
        const resume = (yield* publishable(key.key)).body.resume as string
        const bad = {
          tampered,
          none,
          wrongKey: yield* forge(claims, { key: "another-key-of-at-least-32-characters!!" }),
          futureIat: yield* forge({ ...claims, iat: now() + 3600, exp: now() + 4000 }),
          missingFamily: yield* forge(withoutFamily),
          badPermission: yield* forge({ ...claims, perms: ["admin"] }),
          secret: channel.secret,
          resume,
          garbage: "a.b.c"
        }
        for (const [name, token] of Object.entries(bad)) expectError(yield* refresh(token), 401, "unauthorized", null, name)
        expectError(yield* chat("POST", "/tokens/refresh", {}), 401, "unauthorized")
        expect((yield* refresh(good)).status).toBe(200)
      }))
  })

  describe("POST /tokens/revoke", () => {
    it.effect("with the token itself: its family is revoked; the user's other families stay valid", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const token = yield* generateToken(channel.secret, { user: { id: "u" } })
        const sibling = (yield* refresh(token)).body.token as string
        const otherFamily = yield* generateToken(channel.secret, { user: { id: "u" } })
        const reply = yield* revoke(token)
        expect(reply.status).toBe(200)
        expect(reply.body).toEqual({ revoked: "token" })
        expectError(yield* refresh(sibling), 401, "token_revoked")
        expectError(yield* revoke(token), 401, "token_revoked")
        expect(yield* accepted(otherFamily)).toBe(200)
      }))

    it.effect("with the secret and {token}: that family; another channel's token 403; invalid or expired 200", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const token = yield* generateToken(channel.secret)
        const reply = yield* revoke(channel.secret, { token })
        expect(reply.status).toBe(200)
        expect(reply.body).toEqual({ revoked: "token" })
        expectError(yield* refresh(token), 401, "token_revoked")
        const other = yield* insertChannel(tenant.id)
        const foreign = yield* generateToken(other.secret)
        expectError(yield* revoke(channel.secret, { token: foreign }), 403, "forbidden")
        expect(yield* accepted(foreign)).toBe(200)
        const expired = yield* forge({ ...validClaims(channel, tenant.id), iat: now() - 100, exp: now() - 10 })
        for (const t of ["not-a-token", expired]) expect((yield* revoke(channel.secret, { token: t })).body).toEqual({ revoked: "token" })
      }))

    it.effect("with the secret and {user: {id}}: the user's tokens issued until now; later ones and other users' stay valid", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const mine = yield* generateToken(channel.secret, { user: { id: "alice" } })
        const theirs = yield* generateToken(channel.secret, { user: { id: "bob" } })
        const reply = yield* revoke(channel.secret, { user: { id: "alice" } })
        expect(reply.status).toBe(200)
        expect(reply.body).toEqual({ revoked: "user" })
        expectError(yield* refresh(mine), 401, "token_revoked")
        expect(yield* accepted(theirs)).toBe(200)
        // Issue times are whole seconds: a token of the next second is later than the cut-off.
        yield* Effect.sleep("1100 millis")
        expect(yield* accepted(yield* generateToken(channel.secret, { user: { id: "alice" } }))).toBe(200)
      }))

    it.effect("400 with the secret and neither or both of token and user.id; 401 without a credential", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        for (const body of [undefined, {}, { token: "x", user: { id: "u" } }, { user: {} }]) {
          expectError(yield* revoke(channel.secret, body), 400, "bad_request", null, JSON.stringify(body))
        }
        expectError(yield* chat("POST", "/tokens/revoke", { body: { user: { id: "u" } } }), 401, "unauthorized")
        expectError(yield* revoke(`cs_${"y".repeat(40)}`, { user: { id: "u" } }), 401, "unauthorized")
      }))
  })

  describe("POST /tokens/publishable", () => {
    it.effect("a new conversation and anonymous user; the token is conversation-bound and marked publishable", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const key = yield* createPublishableKey(tenant.api_key, channel.id)
        const reply = yield* publishable(key.key)
        expect(reply.status).toBe(200)
        expect(reply.body).toEqual({
          conversationId: expect.any(String),
          token: expect.any(String),
          expires_in: 900,
          userId: expect.stringMatching(/^anon-/),
          resume: expect.any(String),
          resumed: false
        })
        expect(claimsOf(reply.body.token)).toMatchObject({
          conversation_id: reply.body.conversationId,
          user_id: reply.body.userId,
          src: "publishable",
          cid: channel.id
        })
        const [row] = yield* query<{ channel_id: string; status: string; external_id: string }>(
          `SELECT c.channel_id, c.status, p.external_id
             FROM conversations c JOIN participants p ON p.id = c.participant_id WHERE c.id = $1`,
          [reply.body.conversationId]
        )
        // The anonymous user is the conversation's participant, as the creator of any client conversation is.
        expect(row).toEqual({ channel_id: channel.id, status: "active", external_id: reply.body.userId })
      }))

    it.effect("resumed=true for a valid resume; false for garbage, another channel's, an expired one, a closed conversation", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const key = yield* createPublishableKey(tenant.api_key, channel.id)
        const first = (yield* publishable(key.key)).body
        const again = yield* publishable(key.key, { body: { resume: first.resume } })
        expect(again.body).toMatchObject({ conversationId: first.conversationId, userId: first.userId, resumed: true })
        expect(again.body.token).not.toBe(first.token)

        const otherChannel = yield* insertChannel(tenant.id)
        const otherKey = yield* createPublishableKey(tenant.api_key, otherChannel.id)
        const expired = yield* forge(
          { tid: tenant.id, cid: channel.id, conversation_id: first.conversationId, user_id: first.userId, exp: now() - 1 },
          { typ: "parley-resume+jwt" }
        )
        const fresh = (resume: string, k = key.key) =>
          Effect.map(publishable(k, { body: { resume } }), (reply) => {
            expect(reply.status).toBe(200)
            return reply.body
          })
        for (const [name, resume] of [["garbage", "nonsense"], ["expired", expired], ["a token", first.token]] as const) {
          const body = yield* fresh(resume)
          expect({ name, resumed: body.resumed, same: body.conversationId === first.conversationId }).toEqual({ name, resumed: false, same: false })
        }
        const elsewhere = yield* fresh(first.resume, otherKey.key)
        expect(elsewhere.resumed).toBe(false)
        yield* query("UPDATE conversations SET status = 'closed', closed_at = now() WHERE id = $1", [first.conversationId])
        const closed = yield* fresh(first.resume)
        expect(closed.resumed).toBe(false)
        expect(closed.conversationId).not.toBe(first.conversationId)
      }))

    it.effect("401 without a Bearer, for an unknown, rotated or disabled key, or an inactive channel", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const key = yield* createPublishableKey(tenant.api_key, channel.id)
        expectError(yield* publishable(undefined), 401, "unauthorized")
        expectError(yield* publishable(`pk_${"z".repeat(32)}`), 401, "unauthorized")
        const rotated = yield* manage(tenant.api_key, "POST", `/channels/${channel.id}/publishable_keys/${key.id}/rotate`)
        expectError(yield* publishable(key.key), 401, "unauthorized")
        const current = rotated.body.data.key as string
        expect((yield* publishable(current)).status).toBe(200)
        yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}/publishable_keys/${key.id}`, { publishable_key: { status: "disabled" } })
        expectError(yield* publishable(current), 401, "unauthorized")
        const second = yield* createPublishableKey(tenant.api_key, channel.id)
        yield* deactivateChannel(channel.id)
        expectError(yield* publishable(second.key), 401, "unauthorized")
      }))

    it.effect("403 origin_not_allowed without an Origin or with one the key does not allow", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const key = yield* createPublishableKey(tenant.api_key, channel.id)
        expectError(yield* publishable(key.key, { origin: null }), 403, "origin_not_allowed")
        expectError(yield* publishable(key.key, { origin: "https://evil.example.com" }), 403, "origin_not_allowed")
        // Compared as browsers send it: case and the default port do not matter.
        expect((yield* publishable(key.key, { origin: "HTTPS://Shop.Example.com:443" })).status).toBe(200)
      }))

    it.effect("publishable_token_ip is checked first, per client address; publishable_token per channel", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const key = yield* createPublishableKey(tenant.api_key, channel.id)
        const ip = randomIp()
        for (let i = 0; i < 3; i++) expect((yield* publishable(key.key, { ip })).status).toBe(200)
        // Before the key is even looked at.
        expectError(yield* publishable(`pk_${"q".repeat(32)}`, { ip }), 429, "rate_limited", { retry_after_ms: expect.any(Number) })
        for (let i = 0; i < 3; i++) expect((yield* publishable(key.key)).status).toBe(200)
        expectError(yield* publishable(key.key), 429, "rate_limited", { retry_after_ms: expect.any(Number) })
      }))

    it.effect("refreshing a publishable token counts against publishable_token, not token_generate", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const key = yield* createPublishableKey(tenant.api_key, channel.id)
        for (let i = 0; i < 8; i++) yield* generateToken(channel.secret)
        const issued = (yield* publishable(key.key)).body
        const refreshed = yield* refresh(issued.token)
        expect(refreshed.status).toBe(200)
        expect(refreshed.body.conversationId).toBe(issued.conversationId)
        expect(claimsOf(refreshed.body.token)).toMatchObject({ src: "publishable", user_id: issued.userId })
        for (let i = 0; i < 4; i++) yield* refresh(refreshed.body.token)
        expectError(yield* refresh(refreshed.body.token), 429, "rate_limited", { retry_after_ms: expect.any(Number) })
      }))
  })

  it.effect("a channel disabled while its tokens are in use refuses them within a second (403 channel_inactive)", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const opened = yield* chat("POST", "/conversations", { bearer: yield* generateToken(channel.secret), body: {} })
      expect(opened.status).toBe(201)
      const post = chat("POST", `/conversations/${opened.body.conversationId}/activities`, {
        bearer: opened.body.token,
        body: { type: "message", text: "hi" }
      })
      expect((yield* post).status).toBe(200)
      yield* deactivateChannel(channel.id)
      // The node may answer from the status it read up to a second before; a few seconds bound it under load.
      const refused = yield* eventually(post, (reply) => reply.status !== 200, { within: "3 seconds", what: "the append still accepted" })
      expectError(refused, 403, "channel_inactive")
    }))

  it.effect("a tenant made inactive takes its tokens with it (401)", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id)
      const token = yield* generateToken(channel.secret)
      yield* query("UPDATE tenants SET status = 'inactive' WHERE id = $1", [tenant.id])
      expectError(yield* refresh(token), 401, "unauthorized")
    }))
})
