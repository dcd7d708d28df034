import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { isSensitiveHeader, isSensitiveKey, REDACTED, redactObject, restoreRedacted } from "../src/domain/Redaction.js"

describe("Redaction", () => {
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
})
