import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { commitWhenWaiting, query, serverUrl } from "./support/TestDatabase.js"
import { envelope } from "./support/Envelope.js"
import { admin, createTenant, request, TestNodeLive } from "./support/TestNode.js"

layer(TestNodeLive({ TRUSTED_PROXIES: "127.0.0.1/32" }), { excludeTestServices: true })("admin API: tenants", (it) => {
  describe("authentication", () => {
    it.effect("a missing or wrong token is 401 in the envelope", () =>
      Effect.gen(function*() {
        const missing = yield* request("GET", "/api/v1/admin/tenants")
        expect(missing.status).toBe(401)
        expect(missing.body).toEqual(envelope("unauthorized"))
        const wrong = yield* request("GET", "/api/v1/admin/tenants", {
          headers: { authorization: "Bearer not-the-admin-token-but-long-enough-000" }
        })
        expect(wrong.status).toBe(401)
        expect(wrong.body.error.request_id).toBe(wrong.headers.get("x-request-id"))
      }))

    it.effect("an address outside the allowlist is 403, read through a trusted proxy", () =>
      Effect.gen(function*() {
        const reply = yield* admin("GET", "/tenants", undefined, { "x-forwarded-for": "8.8.8.8" })
        expect(reply.status).toBe(403)
        expect(reply.body).toEqual(envelope("forbidden"))
        const allowed = yield* admin("GET", "/tenants", undefined, { "x-forwarded-for": "127.0.0.5" })
        expect(allowed.status).toBe(200)
      }))
  })

  describe("tenants", () => {
    it.effect("create returns the tenant and its primary key once", () =>
      Effect.gen(function*() {
        const reply = yield* admin("POST", "/tenants", { tenant: { name: "Acme", tier: "high", tenant_id: "ignored" } })
        expect(reply.status).toBe(201)
        expect(reply.body.data).toMatchObject({ name: "Acme", status: "active", tier: "high", limits: {} })
        expect(reply.body.data.api_key).toMatch(/^ck_[0-9A-Za-z]{40}$/)
        expect(reply.headers.get("etag")).toMatch(/^".+"$/)
        expect(reply.body.data.inserted_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/)
        const limits = { activity_create: { limit: 7, scale_ms: 1000 } }
        const limited = yield* admin("POST", "/tenants", { tenant: { name: "Limited", limits } })
        expect(limited.status).toBe(201)
        expect(limited.body.data.limits).toEqual(limits)
        const got = yield* admin("GET", `/tenants/${reply.body.data.id}`)
        expect(got.status).toBe(200)
        expect(got.body.data.api_key).toBeUndefined()
        if (serverUrl !== undefined) {
          const rows = yield* query<{ key_hash: Buffer }>("SELECT key_hash FROM api_keys WHERE tenant_id = $1", [
            reply.body.data.id
          ])
          expect(rows).toHaveLength(1)
          expect(rows[0]!.key_hash.toString("utf8")).not.toContain(reply.body.data.api_key)
        }
      }))

    it.effect("a missing name is 422 validation_failed per field and stores nothing", () =>
      Effect.gen(function*() {
        // Counted in the table: a listing is a page, which may be full before and after.
        const tenants = Effect.map(query<{ n: number }>("SELECT count(*)::int AS n FROM tenants"), (rows) => rows[0]!.n)
        const before = yield* tenants
        const reply = yield* admin("POST", "/tenants", { tenant: { tier: "gold" } })
        expect(reply.status).toBe(422)
        expect(reply.body.error.code).toBe("validation_failed")
        expect(reply.body.error.details).toEqual({ name: [expect.any(String)], tier: [expect.any(String)] })
        expect(yield* tenants).toBe(before)
      }))

    it.effect("wrong types and a missing wrapper are 400 bad_request", () =>
      Effect.gen(function*() {
        const wrongType = yield* admin("POST", "/tenants", { tenant: { name: 42 } })
        expect(wrongType.status).toBe(400)
        expect(wrongType.body).toEqual(envelope("bad_request"))
        const unwrapped = yield* admin("POST", "/tenants", { name: "x" })
        expect(unwrapped.status).toBe(400)
        const broken = yield* request("POST", "/api/v1/admin/tenants", {
          raw: "{not json",
          headers: { authorization: `Bearer ${"test-admin-token-0123456789abcdef0123"}` }
        })
        expect(broken.status).toBe(400)
        expect(broken.body).toEqual(envelope("bad_request"))
        const badId = yield* admin("GET", "/tenants/not-a-uuid")
        expect(badId.status).toBe(400)
        expect(badId.body).toEqual(envelope("bad_request"))
      }))

    it.effect("If-Match: a stale tag is 412 with the current one, * always matches", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const got = yield* admin("GET", `/tenants/${tenant.id}`)
        const etag = got.headers.get("etag")!
        const changed = yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { retention_days: 30 } }, { "if-match": etag })
        expect(changed.status).toBe(200)
        expect(changed.body.data.retention_days).toBe(30)
        const newTag = changed.headers.get("etag")!
        expect(newTag).not.toBe(etag)
        const stale = yield* admin("PUT", `/tenants/${tenant.id}`, { tenant: { retention_days: 40 } }, { "if-match": etag })
        expect(stale.status).toBe(412)
        expect(stale.body.error).toMatchObject({ code: "precondition_failed", details: { current_etag: newTag } })
        const star = yield* admin("PUT", `/tenants/${tenant.id}`, { tenant: { retention_days: 41 } }, { "if-match": "*" })
        expect(star.status).toBe(200)
        const staleDelete = yield* admin("DELETE", `/tenants/${tenant.id}`, undefined, { "if-match": etag })
        expect(staleDelete.status).toBe(412)
        expect((yield* admin("GET", `/tenants/${tenant.id}`)).body.data.retention_days).toBe(41)
      }))

    // The update validates before it locks the row (validation may resolve a host), so If-Match is
    // checked again under the lock, against a change committed in between.
    it.effect.runIf(serverUrl !== undefined)("a change committed between an update's read and its row lock is 412 to the update", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        for (const method of ["PATCH", "PUT"]) {
          const etag = (yield* admin("GET", `/tenants/${tenant.id}`)).headers.get("etag")!
          const raced = yield* commitWhenWaiting(
            [["UPDATE tenants SET name = $2, updated_at = now() WHERE id = $1", [tenant.id, `theirs-${method}`]]],
            admin(method, `/tenants/${tenant.id}`, { tenant: { name: `mine-${method}` } }, { "if-match": etag })
          )
          const current = yield* admin("GET", `/tenants/${tenant.id}`)
          expect(raced.status, method).toBe(412)
          expect(raced.body.error).toMatchObject({ code: "precondition_failed", details: { current_etag: current.headers.get("etag") } })
          expect(current.body.data.name).toBe(`theirs-${method}`)
        }
      }))

    it.effect("a repeated PUT or PATCH is idempotent: same updated_at and ETag, so a retry with If-Match is 200", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const etag = (yield* admin("GET", `/tenants/${tenant.id}`)).headers.get("etag")!
        const fields = { name: "Renamed", tier: "bulk", status: "active", alert_webhook_url: null, limits: {} }
        const first = yield* admin("PUT", `/tenants/${tenant.id}`, { tenant: fields }, { "if-match": etag })
        expect(first.status).toBe(200)
        const tag = first.headers.get("etag")!
        expect(tag).not.toBe(etag)
        yield* Effect.sleep("20 millis")
        for (const method of ["PUT", "PATCH"]) {
          const retried = yield* admin(method, `/tenants/${tenant.id}`, { tenant: fields }, { "if-match": tag })
          expect(retried.status, method).toBe(200)
          expect(retried.body.data, method).toEqual(first.body.data)
          expect(retried.headers.get("etag"), method).toBe(tag)
        }
        const stale = yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: fields }, { "if-match": etag })
        expect(stale.status).toBe(412)
        if (serverUrl !== undefined) {
          const audits = yield* query("SELECT action FROM audit_log WHERE resource_id = $1 AND action = 'tenant.updated'", [
            tenant.id
          ])
          expect(audits).toHaveLength(1)
        }
      }))

    it.effect("rotate_api_key answers with the tenant's ETag, the one GET gives", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const rotated = yield* admin("POST", `/tenants/${tenant.id}/rotate_api_key`)
        expect(rotated.status).toBe(200)
        const got = yield* admin("GET", `/tenants/${tenant.id}`)
        expect(rotated.headers.get("etag")).toMatch(/^".+"$/)
        expect(rotated.headers.get("etag")).toBe(got.headers.get("etag"))
        const { api_key: _key, ...shown } = rotated.body.data
        expect(shown).toEqual(got.body.data)
      }))

    it.effect("invalid limits reject the whole update", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const reply = yield* admin("PATCH", `/tenants/${tenant.id}`, {
          tenant: { name: "renamed", limits: { activity_create: { limit: 0, scale_ms: 1000 } } }
        })
        expect(reply.status).toBe(422)
        expect(Object.keys(reply.body.error.details)).toEqual(["limits"])
        const after = yield* admin("GET", `/tenants/${tenant.id}`)
        expect(after.body.data.name).toBe(tenant["name"])
      }))

    it.effect("order: an unknown tenant is 404 and a stale If-Match 412, whatever the body; then 422", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const etag = (yield* admin("GET", `/tenants/${tenant.id}`)).headers.get("etag")!
        const changed = yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { retention_days: 30 } })
        const current = changed.headers.get("etag")!
        const invalid = { tenant: { name: "", tier: "gold", retention_days: 0 } }
        for (const method of ["PUT", "PATCH"]) {
          const unknown = yield* admin(method, `/tenants/${crypto.randomUUID()}`, invalid, { "if-match": etag })
          expect(unknown.status, method).toBe(404)
          expect(unknown.body, method).toEqual(envelope("not_found"))
          const stale = yield* admin(method, `/tenants/${tenant.id}`, invalid, { "if-match": etag })
          expect(stale.status, method).toBe(412)
          expect(stale.body.error, method).toMatchObject({ code: "precondition_failed", details: { current_etag: current } })
          const fresh = yield* admin(method, `/tenants/${tenant.id}`, invalid, { "if-match": current })
          expect(fresh.status, method).toBe(422)
          expect(Object.keys(fresh.body.error.details).sort(), method).toEqual(["name", "retention_days", "tier"])
        }
        const after = yield* admin("GET", `/tenants/${tenant.id}`)
        expect(after.body.data).toEqual(changed.body.data)
        expect(after.headers.get("etag")).toBe(current)
        if (serverUrl !== undefined) {
          const audits = yield* query("SELECT action FROM audit_log WHERE resource_id = $1 AND action = 'tenant.updated'", [
            tenant.id
          ])
          expect(audits).toHaveLength(1)
        }
      }))

    it.effect("unknown tenants are 404 and delete removes the tenant", () =>
      Effect.gen(function*() {
        const missing = yield* admin("GET", `/tenants/${crypto.randomUUID()}`)
        expect(missing.status).toBe(404)
        expect(missing.body).toEqual(envelope("not_found"))
        const tenant = yield* createTenant()
        const removed = yield* admin("DELETE", `/tenants/${tenant.id}`)
        expect(removed.status).toBe(204)
        expect((yield* admin("GET", `/tenants/${tenant.id}`)).status).toBe(404)
      }))
  })
})
