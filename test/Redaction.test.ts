import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { Limits } from "../src/conversations/ActivityRules.js"
import {
  isSensitiveHeader,
  isSensitiveKey,
  KEY_EXAMINED_CHARS,
  normalizeKey,
  REDACTED,
  redactObject,
  restoreRedacted
} from "../src/domain/Redaction.js"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { request, TestNodeLive } from "./support/TestNode.js"

/** The normaliser before it became one pass: the same names, but quadratic on a run of capitals. */
const regexNormalize = (key: string) =>
  key.replace(/([A-Z]+)([A-Z][a-z])/g, "$1_$2").replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase()
    .replace(/[^a-z0-9]+/g, "_")

/** Deterministic pseudo-random keys of up to 12 characters drawn from `alphabet`. */
const keysFrom = (alphabet: ReadonlyArray<string>, count: number) => {
  let seed = 26
  const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648)
  return Array.from({ length: count }, () => Array.from({ length: next() % 13 }, () => alphabet[next() % alphabet.length]).join(""))
}

describe("Redaction", () => {
  it.effect("normalises keys as the regex normaliser did", () =>
    Effect.sync(() => {
      const realistic = ["accessToken", "APIToken", "X-Api-Key", "api key", "X-Apikey", "clientSecret", "HTTPAuthorization",
        "JWTSecret", "myAPIKey", "OAuth2Token", "oauth2_token", "v2Secret", "AWS_SECRET_ACCESS_KEY", "db__password",
        "__token", "token_", "-x-", "Set-Cookie", "ABC", "ABc", "aBC", "A1B", "a1b2C3", "x.509Key", "ÄpiKey", "clé_secrète",
        "密码", "tökenKey", "\u0130D_token", "\u212Aey", "api\u212Aey", "😀Token", "\ud800Token", "", " ", "ÉTAT", "snake_Case"]
      for (const key of realistic) expect(normalizeKey(key), key).toBe(regexNormalize(key))
      const alphabet = ["A", "B", "a", "b", "0", "_", "-", " ", ".", "É", "é", "\u0130", "\u212A", "😀"]
      for (const key of keysFrom(alphabet, 20_000)) expect(normalizeKey(key), JSON.stringify(key)).toBe(regexNormalize(key))
    }))

  it.effect("judges a key longer than the bound on its two ends", () =>
    Effect.sync(() => {
      const middle = "A".repeat(131_072)
      expect(isSensitiveKey(`${middle}Token`)).toBe(true)
      expect(isSensitiveKey(`${"x".repeat(KEY_EXAMINED_CHARS)}_password`)).toBe(true)
      expect(isSensitiveKey(`api${" ".repeat(100_000)}key`)).toBe(true)
      expect(isSensitiveKey(`token${middle}`)).toBe(false)
      expect(isSensitiveKey(`${middle}tokenizer`)).toBe(false)
      expect(isSensitiveHeader(`X-Auth-${middle}`)).toBe(true)
      // The middle is not read: `auth` there does not make a header sensitive.
      expect(isSensitiveHeader(`X-${"a".repeat(KEY_EXAMINED_CHARS)}-Auth-${"b".repeat(KEY_EXAMINED_CHARS)}`)).toBe(false)
      // At the bound a key is still judged whole.
      const whole = `${"a".repeat(KEY_EXAMINED_CHARS / 2)}Token${"b".repeat(KEY_EXAMINED_CHARS / 2 - 5)}`
      expect(normalizeKey(whole)).toBe(regexNormalize(whole))
    }))

  it.effect("recognises credential-like keys whatever their case or spelling", () =>
    Effect.sync(() => {
      for (const key of ["authorization", "Authorization", "api_key", "API_KEY", "apikey", "apiKey", "password", "secret",
        "token", "access_token", "accessToken", "app_secret", "db_password", "private_key", "x-api-key", "X-Apikey",
        // Acronyms: a run of capitals ends where the next word begins.
        "APIToken", "JWTSecret", "SMTPPassword", "DBPassword", "myAPIKey", "OAuthToken", "APIKEY"]) {
        expect(isSensitiveKey(key), key).toBe(true)
      }
      for (const key of ["url", "name", "tokens_used", "secretary", "keyboard", "monkey", "headers", "phone_number_id"]) {
        expect(isSensitiveKey(key), key).toBe(false)
      }
      for (const name of ["Authorization", "X-Auth-Token", "X-Api-Key", "Cookie", "X-Authentication"]) {
        expect(isSensitiveHeader(name), name).toBe(true)
      }
      expect(isSensitiveHeader("X-Trace-Id")).toBe(false)
    }))

  it.effect("hides values at any depth, inside arrays and whole objects under a credential key", () =>
    Effect.sync(() => {
      const stored = {
        a: { b: [{ c: { password: "p", keep: 1 } }, [{ token: "t" }]] },
        headers: { "X-Auth": "x", Accept: "json" },
        nested: { headers: { Authorization: "Bearer" } },
        secret: { whole: "object" },
        none_token: null
      }
      expect(redactObject(stored)).toEqual({
        a: { b: [{ c: { password: REDACTED, keep: 1 } }, [{ token: REDACTED }]] },
        headers: { "X-Auth": REDACTED, Accept: "json" },
        nested: { headers: { Authorization: REDACTED } },
        secret: REDACTED,
        none_token: null
      })
      // Only header maps hide `*auth*` names; elsewhere the key rule alone applies.
      expect(redactObject({ author: "me" })).toEqual({ author: "me" })
    }))

  it.effect("restores [REDACTED] from the same path and reports paths with nothing stored", () =>
    Effect.sync(() => {
      const stored = { list: [{ password: "p0" }, { password: "p1" }], deep: { x: { api_key: "k" } }, plain: "v" }
      const missing: Array<string> = []
      const restored = restoreRedacted(
        {
          list: [{ password: REDACTED }, { password: "new" }, { password: REDACTED }],
          deep: { x: { api_key: REDACTED, extra_token: REDACTED } },
          plain: REDACTED,
          added: "a"
        },
        stored,
        (path) => missing.push(path)
      )
      expect(restored).toEqual({
        list: [{ password: "p0" }, { password: "new" }, { password: undefined }],
        deep: { x: { api_key: "k", extra_token: undefined } },
        plain: "v",
        added: "a"
      })
      expect(missing).toEqual(["list[2].password", "deep.x.extra_token"])
      // A whole redacted object comes back whole.
      expect(restoreRedacted({ secret: REDACTED }, { secret: { a: 1 } }, () => {})).toEqual({ secret: { a: 1 } })
    }))

  it.effect("hides the password of a URL, or its whole userinfo when it has none, and nothing else", () =>
    Effect.sync(() => {
      const shown = {
        nats: "nats://user:pass@host:4222",
        lone: "https://token@hooks.example.com/x",
        emptyPass: "https://user:@host",
        emptyUser: "https://:pass@host",
        atInPass: "https://user:p@ss@host/x",
        afterBackslash: "https://user:pass@host\\x@y",
        inText: "see https://a:b@h1 and http://c@h2/ then",
        inArray: [{ url: "tls://u:p@bus" }],
        headers: { "X-Trace": "https://u:p@h" }
      }
      const redacted = {
        nats: "nats://user:[REDACTED]@host:4222",
        lone: "https://[REDACTED]@hooks.example.com/x",
        emptyPass: "https://[REDACTED]@host",
        emptyUser: "https://:[REDACTED]@host",
        atInPass: "https://user:[REDACTED]@host/x",
        afterBackslash: "https://user:[REDACTED]@host\\x@y",
        inText: "see https://a:[REDACTED]@h1 and http://[REDACTED]@h2/ then",
        inArray: [{ url: "tls://u:[REDACTED]@bus" }],
        headers: { "X-Trace": "https://u:[REDACTED]@h" }
      }
      expect(redactObject(shown)).toEqual(redacted)
      expect(redactObject(redacted)).toEqual(redacted)
      const plain = ["https://host/x?to=a@b", "mailto:a@b.example", "https://@host", "a@b://", "user:pass@host", "://"]
      for (const text of plain) expect(redactObject({ text }), text).toEqual({ text })
      expect(isSensitiveKey("url")).toBe(false)
    }))

  it.effect("restores a URL sent back as shown; a redacted credential on another URL is reported", () =>
    Effect.sync(() => {
      const stored = { url: "nats://user:pass@host:4222", hooks: ["https://token@h/a"], note: "x" }
      const problems: Array<string> = []
      const report = (path: string, problem: string) => problems.push(`${path}: ${problem}`)
      expect(restoreRedacted({ ...redactObject(stored), note: "y" }, stored, report)).toEqual({ ...stored, note: "y" })
      expect(problems).toEqual([])
      const sent = {
        url: "nats://user:[REDACTED]@elsewhere:4222",
        hooks: ["https://token@h/a", "https://[REDACTED]@h/b"],
        note: "a [REDACTED] note, no URL"
      }
      expect(restoreRedacted(sent, stored, report)).toEqual(sent)
      expect(problems).toEqual([
        "url: holds a [REDACTED] URL credential but is not the stored URL: send the credential",
        "hooks[1]: holds a [REDACTED] URL credential but is not the stored URL: send the credential"
      ])
    }))
})

layer(TestNodeLive(), { excludeTestServices: true })("Redaction on the append path", (it) => {
  it.effect("a payload key of a hundred thousand capitals is answered, and the node keeps answering meanwhile", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      const append = (name: string) =>
        tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { message_type: "my_widget", payload: { [name]: 0 } })
      // The first payload is exactly at its limit, so it is stored and its delivery copy redacted.
      const appends = yield* Effect.fork(Effect.all([
        append("A".repeat(Limits.payload - JSON.stringify({ "": 0 }).length)),
        append("A".repeat(131_072))
      ], { concurrency: 2 }))
      const probes: Array<number> = []
      while ((yield* Fiber.poll(appends))._tag === "None") {
        const started = Date.now()
        expect((yield* request("GET", "/health/live")).status).toBe(200)
        probes.push(Date.now() - started)
      }
      const [atLimit, over] = yield* Fiber.join(appends)
      expect(atLimit.status, JSON.stringify(atLimit.body)).toBe(201)
      expect(over.status).toBe(422)
      expect(Object.keys(over.body.error.details)).toEqual(["payload"])
      expect(Math.max(...probes)).toBeLessThan(1000)
    }))
})
