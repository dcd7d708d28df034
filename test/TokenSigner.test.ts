import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { SignJWT } from "jose"
import { SIGNING_KEY_NAME, TokenSigner } from "../src/auth/TokenSigner.js"
import type { ClientTokenGrant } from "../src/domain/ClientToken.js"
import { query } from "./support/TestDatabase.js"
import { TestNodeLive } from "./support/TestNode.js"
import { TestSigner } from "./support/TestSigner.js"
import { ChannelId } from "../src/domain/Channel.js"
import { ConversationId } from "../src/domain/Conversation.js"
import { TenantId } from "../src/domain/Tenant.js"

const ENV_KEY = "an-operator-chosen-signing-key-0123456789"

const grant = (): ClientTokenGrant => ({
  user_id: `user-${crypto.randomUUID()}`,
  tid: TenantId.to.make(crypto.randomUUID()),
  cid: ChannelId.to.make(crypto.randomUUID()),
  fam: crypto.randomUUID()
})

const storedKeys = query<{ value: string }>("SELECT value FROM installation_secrets WHERE name = $1", [SIGNING_KEY_NAME])

/** Signs with one signer and verifies with another, as two nodes would. */
const crossVerify = (token: string) => Effect.flatMap(TokenSigner, (signer) => signer.verify(token))
const signWith = (g: ClientTokenGrant, ttl = 60) => Effect.flatMap(TokenSigner, (signer) => signer.sign(g, ttl))

const now = () => Math.floor(Date.now() / 1000)

/** A token signed with `key` outside the signer, for shapes the signer never produces. */
const forge = (claims: Record<string, unknown>, key: string, alg = "HS256") =>
  Effect.promise(() => new SignJWT(claims).setProtectedHeader({ alg }).sign(new TextEncoder().encode(key)))

layer(TestNodeLive(), { excludeTestServices: true })("TokenSigner", (it) => {
  it.effect("the node generated a key once; other signers on the database reuse it", () =>
    Effect.gen(function*() {
      const before = yield* storedKeys
      expect(before).toHaveLength(1)
      expect(before[0]!.value).toMatch(/^[A-Za-z0-9_-]{43,}$/)
      const g = grant()
      const token = yield* signWith(g).pipe(Effect.provide(TestSigner()))
      const claims = yield* crossVerify(token).pipe(Effect.provide(TestSigner()))
      expect(claims).toMatchObject({ ...g, sub: g.user_id })
      expect(yield* storedKeys).toEqual(before)
    }))

  it.effect("signers starting together on a database without a key agree on one", () =>
    Effect.gen(function*() {
      const [original] = yield* storedKeys
      yield* query("DELETE FROM installation_secrets WHERE name = $1", [SIGNING_KEY_NAME])
      const tokens = yield* Effect.all(
        Array.from({ length: 4 }, () => signWith(grant()).pipe(Effect.provide(TestSigner()))),
        { concurrency: "unbounded" }
      )
      const stored = yield* storedKeys
      expect(stored).toHaveLength(1)
      expect(stored[0]!.value).not.toBe(original!.value)
      yield* Effect.forEach(tokens, (token) => crossVerify(token).pipe(Effect.provide(TestSigner())))
      // Put the node's key back: the node read it at start and keeps using it.
      yield* query("UPDATE installation_secrets SET value = $2 WHERE name = $1", [SIGNING_KEY_NAME, original!.value])
    }))

  it.effect("TOKEN_SIGNING_KEY wins over the stored key and leaves it alone", () =>
    Effect.gen(function*() {
      const before = yield* storedKeys
      const g = grant()
      const withEnvKey = yield* signWith(g).pipe(Effect.provide(TestSigner({ TOKEN_SIGNING_KEY: ENV_KEY })))
      expect(yield* crossVerify(withEnvKey).pipe(Effect.provide(TestSigner({ TOKEN_SIGNING_KEY: ENV_KEY })))).toMatchObject(g)
      const refused = yield* Effect.flip(crossVerify(withEnvKey).pipe(Effect.provide(TestSigner())))
      expect(refused._tag).toBe("Unauthorized")
      const withStoredKey = yield* signWith(g).pipe(Effect.provide(TestSigner()))
      const refusedToo = yield* Effect.flip(crossVerify(withStoredKey).pipe(Effect.provide(TestSigner({ TOKEN_SIGNING_KEY: ENV_KEY }))))
      expect(refusedToo._tag).toBe("Unauthorized")
      expect(yield* storedKeys).toEqual(before)
    }))

  it.effect("claims round-trip: sub is the user id, a fresh jti, exp = iat + ttl, optional claims kept", () =>
    Effect.gen(function*() {
      const signer = yield* TokenSigner
      const g: ClientTokenGrant = {
        ...grant(),
        conversation_id: ConversationId.to.make(crypto.randomUUID()),
        scope: "channel",
        perms: ["read", "typing"],
        src: "publishable"
      }
      const first = yield* signer.verify(yield* signer.sign(g, 1800))
      const second = yield* signer.verify(yield* signer.sign(g, 1800))
      expect(first).toEqual({ ...g, sub: g.user_id, jti: expect.any(String), iat: expect.any(Number), exp: first.iat + 1800 })
      expect(first.jti).toMatch(/^[0-9a-f-]{36}$/)
      expect(second.jti).not.toBe(first.jti)
      expect(Math.abs(first.iat - now())).toBeLessThanOrEqual(1)
      const plain = yield* signer.verify(yield* signer.sign(grant(), 60))
      expect(Object.keys(plain).sort()).toEqual(["cid", "exp", "fam", "iat", "jti", "sub", "tid", "user_id"])
    }).pipe(Effect.provide(TestSigner())))

  it.effect("an expired token is token_expired; every other bad token is unauthorized", () =>
    Effect.gen(function*() {
      const signer = yield* TokenSigner
      const valid = { ...grant(), user_id: "u", sub: "u", jti: crypto.randomUUID(), iat: now() - 120, exp: now() + 60 }
      const expired = yield* Effect.flip(signer.verify(yield* forge({ ...valid, exp: now() - 60 }, ENV_KEY)))
      expect(expired._tag).toBe("TokenExpired")
      expect(expired).toMatchObject({ code: "token_expired", message: expect.any(String) })
      const good = yield* forge(valid, ENV_KEY)
      const { tid: _, ...withoutTenant } = valid
      expect((yield* signer.verify(good)).user_id).toBe("u")
      const [header, payload, signature] = good.split(".")
      const tampered = `${header}.${Buffer.from(JSON.stringify({ ...valid, user_id: "admin" })).toString("base64url")}.${signature}`
      const bad = [
        "",
        "not-a-token",
        tampered,
        `${header}.${payload}.`,
        yield* forge(valid, `${ENV_KEY}-other`),
        yield* forge(valid, ENV_KEY, "HS512"),
        // Signed with our key but missing a claim, or with a claim of the wrong type.
        yield* forge(withoutTenant, ENV_KEY),
        yield* forge({ ...valid, tid: "not-a-uuid" }, ENV_KEY),
        yield* forge({ ...valid, perms: ["admin"] }, ENV_KEY),
        // An expired token with a foreign signature is not "expired": it is not ours at all.
        yield* forge({ ...valid, exp: now() - 60 }, `${ENV_KEY}-other`)
      ]
      for (const token of bad) {
        const error = yield* Effect.flip(signer.verify(token))
        expect(error).toMatchObject({ _tag: "Unauthorized", code: "unauthorized" })
      }
    }).pipe(Effect.provide(TestSigner({ TOKEN_SIGNING_KEY: ENV_KEY }))))
})
