import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { commitWhenWaiting, query, serverUrl } from "./support/TestDatabase.js"
import { admin, createTenant, manage, request, TestNodeLive } from "./support/TestNode.js"

layer(TestNodeLive(), { excludeTestServices: true })("management API: settings and keys", (it) => {
  it.effect("GET settings returns the tenant with an ETag; PATCH changes only what was sent", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const got = yield* manage(tenant.api_key, "GET", "/settings")
      expect(got.status).toBe(200)
      expect(got.body.data.id).toBe(tenant.id)
      expect(got.headers.get("etag")).toBeTruthy()
      const changed = yield* manage(tenant.api_key, "PATCH", "/settings", {
        settings: { limits: { activity_create: { limit: 5, scale_ms: 1000 } }, name: "ignored" }
      })
      expect(changed.status).toBe(200)
      expect(changed.body.data.limits).toEqual({ activity_create: { limit: 5, scale_ms: 1000 } })
      expect(changed.body.data.name).toBe(tenant["name"])
      const reset = yield* manage(tenant.api_key, "PUT", "/settings", { settings: { limits: {} } })
      expect(reset.body.data.limits).toEqual({})
    }))

  it.effect("a repeated PATCH or PUT is idempotent: same updated_at and ETag, so a retry with If-Match is 200", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const etag = (yield* manage(tenant.api_key, "GET", "/settings")).headers.get("etag")!
      const settings = {
        retention_days: 31,
        allowed_upload_types: ["image/png", "text/plain"],
        limits: { activity_create: { limit: 5, scale_ms: 1000 }, upload: { limit: 2, scale_ms: 500 } }
      }
      const first = yield* manage(tenant.api_key, "PATCH", "/settings", { settings }, { "if-match": etag })
      expect(first.status).toBe(200)
      const tag = first.headers.get("etag")!
      expect(tag).not.toBe(etag)
      yield* Effect.sleep("20 millis")
      // The same values, the limits in another key order: nothing to change.
      const reordered = {
        limits: { upload: { scale_ms: 500, limit: 2 }, activity_create: { scale_ms: 1000, limit: 5 } },
        allowed_upload_types: ["IMAGE/PNG", "text/plain"],
        retention_days: 31
      }
      for (const method of ["PATCH", "PUT"]) {
        const retried = yield* manage(tenant.api_key, method, "/settings", { settings: reordered }, { "if-match": tag })
        expect(retried.status, method).toBe(200)
        expect(retried.body.data, method).toEqual(first.body.data)
        expect(retried.headers.get("etag"), method).toBe(tag)
      }
      const stale = yield* manage(tenant.api_key, "PATCH", "/settings", { settings: { retention_days: 31 } }, {
        "if-match": etag
      })
      expect(stale.status).toBe(412)
      // If-Match compares strongly (RFC 9110): the current tag marked weak does not match.
      const weak = yield* manage(tenant.api_key, "PATCH", "/settings", { settings: { retention_days: 32 } }, {
        "if-match": `W/${tag}`
      })
      expect(weak.status).toBe(412)
      if (serverUrl !== undefined) {
        const audits = yield* query<{ changes: { limits?: unknown } }>(
          "SELECT changes FROM audit_log WHERE resource_id = $1 AND action = 'settings.updated'",
          [tenant.id]
        )
        expect(audits).toHaveLength(1)
        // The audit row holds the limits as JSON, not as a string of JSON.
        expect(audits[0]!.changes.limits).toEqual({ upload: { scale_ms: 500, limit: 2 }, activity_create: { scale_ms: 1000, limit: 5 } })
      }
    }))

  it.effect("limits on a non-overridable bucket reject the whole request", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const reply = yield* manage(tenant.api_key, "PATCH", "/settings", {
        settings: { retention_days: 10, limits: { login_ip: { limit: 5, scale_ms: 1000 } } }
      })
      expect(reply.status).toBe(422)
      expect(reply.body.error.code).toBe("validation_failed")
      expect((yield* manage(tenant.api_key, "GET", "/settings")).body.data.retention_days).toBe(90)
    }))

  it.effect("a window longer than a year or a limit beyond an exact integer is 422 validation_failed", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      for (const window of [{ limit: 5, scale_ms: 365 * 86_400_000 + 1 }, { limit: 2 ** 53, scale_ms: 1000 }]) {
        const reply = yield* manage(tenant.api_key, "PATCH", "/settings", { settings: { limits: { upload: window } } })
        expect(reply.status).toBe(422)
        expect(reply.body.error.code).toBe("validation_failed")
        expect(Object.keys(reply.body.error.details)).toEqual(["limits"])
      }
      const year = yield* manage(tenant.api_key, "PATCH", "/settings", {
        settings: { limits: { upload: { limit: 5, scale_ms: 365 * 86_400_000 } } }
      })
      expect(year.status).toBe(200)
    }))

  // The change validates before it locks the row (validation may resolve a host), so If-Match is
  // checked again under the lock, against a change committed in between.
  it.effect.runIf(serverUrl !== undefined)("a change committed between a settings update's read and its row lock is 412 to the update", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      for (const [method, days] of [["PATCH", 40], ["PUT", 41]] as const) {
        const etag = (yield* manage(tenant.api_key, "GET", "/settings")).headers.get("etag")!
        const raced = yield* commitWhenWaiting(
          [["UPDATE tenants SET retention_days = $2, updated_at = now() WHERE id = $1", [tenant.id, days]]],
          manage(tenant.api_key, method, "/settings", { settings: { retention_days: 50 } }, { "if-match": etag })
        )
        const current = yield* manage(tenant.api_key, "GET", "/settings")
        expect(raced.status, method).toBe(412)
        expect(raced.body.error).toMatchObject({ code: "precondition_failed", details: { current_etag: current.headers.get("etag") } })
        expect(current.body.data.retention_days).toBe(days)
      }
    }))

  it.effect("a stale If-Match is 412 whatever the body, and changes nothing; with the current tag an invalid body is 422", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const etag = (yield* manage(tenant.api_key, "GET", "/settings")).headers.get("etag")!
      const changed = yield* manage(tenant.api_key, "PATCH", "/settings", { settings: { retention_days: 30 } })
      const current = changed.headers.get("etag")!
      const invalid = { settings: { retention_days: 0, allowed_upload_types: ["not a type"] } }
      for (const method of ["PUT", "PATCH"]) {
        const stale = yield* manage(tenant.api_key, method, "/settings", invalid, { "if-match": etag })
        expect(stale.status, method).toBe(412)
        expect(stale.body.error, method).toMatchObject({ code: "precondition_failed", details: { current_etag: current } })
        const fresh = yield* manage(tenant.api_key, method, "/settings", invalid, { "if-match": current })
        expect(fresh.status, method).toBe(422)
        expect(fresh.body.error.code, method).toBe("validation_failed")
      }
      const after = yield* manage(tenant.api_key, "GET", "/settings")
      expect(after.body.data).toEqual(changed.body.data)
      expect(after.headers.get("etag")).toBe(current)
    }))

  it.effect("no key is 401, a channel token 403, a key without manage 403 insufficient_scope", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      expect((yield* request("GET", "/api/v1/manage/settings")).status).toBe(401)
      const token = yield* request("GET", "/api/v1/manage/settings", { headers: { "x-channel-token": "cs_x" } })
      expect(token.status).toBe(403)
      expect(token.body.error.code).toBe("forbidden")
      const readKey = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, { api_key: { name: "r", scopes: ["read"] } })
      expect(readKey.status).toBe(201)
      const denied = yield* manage(readKey.body.data.key, "GET", "/settings")
      expect(denied.status).toBe(403)
      expect(denied.body.error).toMatchObject({ code: "insufficient_scope", details: { required: ["manage"] } })
    }))

  it.effect("status=inactive blocks every key of the tenant at once, active restores them", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      expect((yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { status: "inactive" } })).status).toBe(200)
      expect((yield* manage(tenant.api_key, "GET", "/settings")).status).toBe(401)
      yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { status: "active" } })
      expect((yield* manage(tenant.api_key, "GET", "/settings")).status).toBe(200)
    }))

  it.effect("rotate_api_key: the new key works, the old one during the grace period", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const rotated = yield* admin("POST", `/tenants/${tenant.id}/rotate_api_key`)
      expect(rotated.status).toBe(200)
      expect(rotated.body.data.api_key).toMatch(/^ck_/)
      expect(rotated.body.data.api_key).not.toBe(tenant.api_key)
      expect((yield* manage(rotated.body.data.api_key, "GET", "/settings")).status).toBe(200)
      expect((yield* manage(tenant.api_key, "GET", "/settings")).status).toBe(200)
    }))
})

layer(TestNodeLive({ API_KEY_ROTATION_GRACE_SECONDS: "0" }), { excludeTestServices: true })("primary key rotation without grace", (it) => {
  it.effect("the old key stops at once", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const rotated = yield* admin("POST", `/tenants/${tenant.id}/rotate_api_key`)
      expect((yield* manage(tenant.api_key, "GET", "/settings")).status).toBe(401)
      expect((yield* manage(rotated.body.data.api_key, "GET", "/settings")).status).toBe(200)
    }))
})
