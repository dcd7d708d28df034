import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { envelope, statusAndCode } from "./support/Envelope.js"
import { commitWhenWaiting, query, serverUrl } from "./support/TestDatabase.js"
import { admin, createTenant, manage, request, TestNodeLive } from "./support/TestNode.js"

const PASSWORD = "correct horse battery staple"
const USER_FIELDS = ["email", "id", "inserted_at", "name", "role", "status", "tenant_id", "totp_enabled", "updated_at"]

const newEmail = () => `user-${crypto.randomUUID().slice(0, 8)}@example.com`

/** Creates a user through the API and returns the reply's data and ETag. */
const createUser = (key: string, fields: Record<string, unknown> = {}) =>
  Effect.map(manage(key, "POST", "/users", { user: { email: newEmail(), password: PASSWORD, ...fields } }), (reply) => {
    expect(reply.status).toBe(201)
    return { user: reply.body.data as Record<string, unknown> & { id: string; email: string }, etag: reply.headers.get("etag")! }
  })

const userCount = (tenantId: string) =>
  Effect.map(
    query<{ n: number }>("SELECT count(*)::int AS n FROM portal_users WHERE tenant_id = $1", [tenantId]),
    (rows) => rows[0]!.n
  )

/** Opens `count` portal sessions for the user, as a login would. */
const openSessions = (userId: string, count: number) =>
  Effect.forEach(Array.from({ length: count }), () =>
    query(
      "INSERT INTO portal_sessions (id, user_id, token_hash, expires_at) VALUES ($1, $2, $3, now() + interval '12 hours')",
      [crypto.randomUUID(), userId, randomBytes(32)]
    ))

const sessionCount = (userId: string) =>
  Effect.map(
    query<{ n: number }>("SELECT count(*)::int AS n FROM portal_sessions WHERE user_id = $1", [userId]),
    (rows) => rows[0]!.n
  )

const auditOf = (resourceId: string) =>
  query<{ actor_type: string; actor_id: string; action: string; changes: unknown }>(
    "SELECT actor_type, actor_id, action, changes FROM audit_log WHERE resource_id = $1 ORDER BY inserted_at, action",
    [resourceId]
  )

layer(TestNodeLive(), { excludeTestServices: true })("management API: users", (it) => {
  // Tests that read what was stored need direct SQL, which only a PostgreSQL server offers.
  const stored = it.effect.runIf(serverUrl !== undefined)

  describe("create and read", () => {
    stored("create answers 201 with the user and an ETag; only an argon2id hash is stored, never returned", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const email = newEmail()
        const reply = yield* manage(tenant.api_key, "POST", "/users", {
          user: { email, name: " Ada ", password: PASSWORD, tenant_id: crypto.randomUUID(), totp_enabled: true }
        })
        expect(reply.status).toBe(201)
        expect(Object.keys(reply.body.data).sort()).toEqual(USER_FIELDS)
        expect(reply.body.data).toMatchObject({
          tenant_id: tenant.id,
          email,
          name: "Ada",
          role: "member",
          status: "active",
          totp_enabled: false
        })
        expect(reply.body.data.inserted_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/)
        expect(reply.headers.get("etag")).toMatch(/^".+"$/)
        expect(JSON.stringify(reply.body)).not.toContain(PASSWORD)

        const got = yield* manage(tenant.api_key, "GET", `/users/${reply.body.data.id}`)
        expect(got.status).toBe(200)
        expect(got.body.data).toEqual(reply.body.data)
        expect(got.headers.get("etag")).toBe(reply.headers.get("etag"))

        const [row] = yield* query<{ password_hash: string; totp_secret: string | null }>(
          "SELECT password_hash, totp_secret FROM portal_users WHERE id = $1 AND password_hash LIKE '$argon2id$%'",
          [reply.body.data.id]
        )
        expect(row).toBeDefined()
        expect(row!.password_hash).not.toContain(PASSWORD)
        expect(JSON.stringify(got.body)).not.toContain(row!.password_hash)

        const audit = yield* auditOf(reply.body.data.id)
        expect(audit).toEqual([{
          actor_type: "tenant_api",
          actor_id: tenant.id,
          action: "user.created",
          changes: { email, name: "Ada", role: "member", status: "active" }
        }])
      }))

    it.effect("role and status can be chosen on create", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const { user } = yield* createUser(tenant.api_key, { role: "owner", status: "inactive", name: null })
        expect(user).toMatchObject({ role: "owner", status: "inactive", name: null })
      }))

    it.effect("the list is the tenant's own users, newest first, without secrets", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const other = yield* createTenant()
        const first = yield* createUser(tenant.api_key)
        const second = yield* createUser(tenant.api_key)
        yield* createUser(other.api_key)
        const list = yield* manage(tenant.api_key, "GET", "/users")
        expect(list.status).toBe(200)
        expect(list.body.data.map((u: { id: string }) => u.id)).toEqual([second.user.id, first.user.id])
        expect(Object.keys(list.body.data[0]).sort()).toEqual(USER_FIELDS)
      }))
  })

  describe("validation", () => {
    const tooShort = "must be at least 12 characters"
    const rows: ReadonlyArray<readonly [string, string, string | undefined, ReadonlyArray<string>]> = [
      ["missing", "ada@example.com", undefined, ["is required"]],
      ["11 characters", "ada@example.com", "abcdefghijk", [tooShort]],
      ["11 characters beyond the BMP (22 UTF-16 units)", "ada@example.com", "🔒".repeat(11), [tooShort]],
      ["empty", "ada@example.com", "", [tooShort]],
      ["longer than 1024 characters", "ada@example.com", "x".repeat(1025), ["must be at most 1024 characters"]],
      ["the e-mail address, any case", "Ada.King@Example.com", "my ADA.KING@EXAMPLE.COM pw", [
        "must not contain the e-mail address"
      ]],
      ["the local part, any case", "ada.king@example.com", "Ada.King-rules-2024", [
        "must not contain the name part of the e-mail address"
      ]],
      ["short and the e-mail address", "ab@cd.io", "ab@cd.io!", [tooShort, "must not contain the e-mail address"]]
    ]
    for (const [label, email, password, messages] of rows) {
      stored(`password policy rejects a password that is ${label} (422, nothing stored)`, () =>
        Effect.gen(function*() {
          const tenant = yield* createTenant()
          const reply = yield* manage(tenant.api_key, "POST", "/users", {
            user: { email, ...(password === undefined ? {} : { password }) }
          })
          expect(reply.status).toBe(422)
          expect(reply.body.error).toMatchObject({ code: "validation_failed", details: { password: messages } })
          expect(Object.keys(reply.body.error.details)).toEqual(["password"])
          expect(yield* userCount(tenant.id)).toBe(0)
        }))
    }

    it.effect("a 12-character password, and a short local part inside the password, are accepted", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        yield* createUser(tenant.api_key, { password: "abcdefghijkl" })
        // Local parts under four characters would forbid too many passwords to be worth checking.
        yield* createUser(tenant.api_key, { email: "bo@example.com", password: "bonbon-bonbon" })
      }))

    stored("every invalid field is reported at once and nothing is stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const reply = yield* manage(tenant.api_key, "POST", "/users", {
          user: { email: "not-an-address", name: "   ", password: PASSWORD, role: "god", status: "paused" }
        })
        expect(reply.status).toBe(422)
        expect(reply.body.error.code).toBe("validation_failed")
        expect(Object.keys(reply.body.error.details).sort()).toEqual(["email", "name", "role", "status"])
        expect(yield* userCount(tenant.id)).toBe(0)
      }))

    const badAddresses = ["", "plain", "a@b", "a b@example.com", "@example.com", "ada@", "ada@exa mple.com",
      "ada@@example.com", "ada@-example.com", ".ada@example.com", `${"a".repeat(65)}@example.com`]
    stored("an e-mail address must have a sane shape", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        for (const email of badAddresses) {
          const reply = yield* manage(tenant.api_key, "POST", "/users", { user: { email, password: PASSWORD } })
          expect(reply.status, email).toBe(422)
          expect(Object.keys(reply.body.error.details), email).toEqual(["email"])
        }
        const missing = yield* manage(tenant.api_key, "POST", "/users", { user: { password: PASSWORD } })
        expect(missing.body.error.details).toEqual({ email: ["is required"] })
        expect(yield* userCount(tenant.id)).toBe(0)
        for (const email of ["a.b+tag@sub.example.co.uk", "josé@bücher.example", "x@xn--p1ai.xn--p1ai"]) {
          yield* createUser(tenant.api_key, { email })
        }
      }))

    stored("an e-mail address is unique per tenant regardless of case, also on update", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const other = yield* createTenant()
        const { user } = yield* createUser(tenant.api_key, { email: "Grace@Example.com" })
        const duplicate = yield* manage(tenant.api_key, "POST", "/users", {
          user: { email: "grace@EXAMPLE.com", password: PASSWORD }
        })
        expect(duplicate.status).toBe(422)
        expect(duplicate.body.error).toMatchObject({ code: "validation_failed", details: { email: ["is already taken"] } })
        expect(yield* userCount(tenant.id)).toBe(1)
        yield* createUser(other.api_key, { email: "grace@example.com" })

        const second = yield* createUser(tenant.api_key)
        const taken = yield* manage(tenant.api_key, "PATCH", `/users/${second.user.id}`, {
          user: { email: "GRACE@example.com", name: "changed" }
        })
        expect(taken.status).toBe(422)
        expect(taken.body.error.details).toEqual({ email: ["is already taken"] })
        expect((yield* manage(tenant.api_key, "GET", `/users/${second.user.id}`)).body.data).toEqual(second.user)
        // Changing only the case of one's own address is not a conflict.
        const recased = yield* manage(tenant.api_key, "PATCH", `/users/${user.id}`, { user: { email: "grace@example.com" } })
        expect(recased.status).toBe(200)
        expect(recased.body.data.email).toBe("grace@example.com")
      }))

    stored("bad JSON, wrong types, a missing wrapper and a malformed id are 400 and store nothing", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const broken = yield* request("POST", "/api/v1/manage/users", {
          raw: "{\"user\": {",
          headers: { "x-api-key": tenant.api_key }
        })
        expect(broken.status).toBe(400)
        expect(broken.body.error.code).toBe("bad_request")
        const wrongType = yield* manage(tenant.api_key, "POST", "/users", { user: { email: 42, password: PASSWORD } })
        expect(wrongType.status).toBe(400)
        expect(wrongType.body.error.code).toBe("bad_request")
        const unwrapped = yield* manage(tenant.api_key, "POST", "/users", { email: newEmail(), password: PASSWORD })
        expect(unwrapped.status).toBe(400)
        expect(yield* userCount(tenant.id)).toBe(0)
        for (const method of ["GET", "PUT", "PATCH", "DELETE"]) {
          const badId = yield* manage(tenant.api_key, method, "/users/not-a-uuid", method.startsWith("P") ? { user: {} } : undefined)
          expect(badId.status, method).toBe(400)
          expect(badId.body.error.code, method).toBe("bad_request")
        }
      }))
  })

  describe("update", () => {
    stored("PUT and PATCH set the sent fields, keep the rest, ignore password and are idempotent", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const { etag, user } = yield* createUser(tenant.api_key, { name: "Ada" })
        const [before] = yield* query<{ password_hash: string }>("SELECT password_hash FROM portal_users WHERE id = $1", [user.id])
        const email = newEmail()
        const patched = yield* manage(tenant.api_key, "PATCH", `/users/${user.id}`, {
          user: { email, role: "admin", password: "a whole new password", totp_enabled: true, id: crypto.randomUUID() }
        })
        expect(patched.status).toBe(200)
        expect(patched.body.data).toMatchObject({ id: user.id, email, name: "Ada", role: "admin", status: "active", totp_enabled: false })
        const patchedTag = patched.headers.get("etag")
        expect(patchedTag).toMatch(/^".+"$/)
        expect(patchedTag).not.toBe(etag)
        const [after] = yield* query<{ password_hash: string }>("SELECT password_hash FROM portal_users WHERE id = $1", [user.id])
        expect(after!.password_hash).toBe(before!.password_hash)

        const put = yield* manage(tenant.api_key, "PUT", `/users/${user.id}`, { user: { name: null, role: "viewer" } })
        expect(put.status).toBe(200)
        expect(put.body.data).toMatchObject({ email, name: null, role: "viewer" })
        const again = yield* manage(tenant.api_key, "PUT", `/users/${user.id}`, { user: { name: null, role: "viewer" } })
        expect(again.body.data).toEqual(put.body.data)
        expect(again.headers.get("etag")).toBe(put.headers.get("etag"))

        const audit = yield* auditOf(user.id)
        expect(audit.map((a) => a.action)).toEqual(["user.created", "user.updated", "user.updated"])
        expect(audit[1]!.changes).toEqual({ email, role: "admin" })
        expect(audit[2]!.changes).toEqual({ name: null, role: "viewer" })
      }))

    it.effect("password is ignored on update whatever its JSON type, as server-apis.md says", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const { user } = yield* createUser(tenant.api_key)
        for (const [method, password] of [["PATCH", 12345], ["PUT", { a: 1 }], ["PATCH", null]] as const) {
          const reply = yield* manage(tenant.api_key, method, `/users/${user.id}`, { user: { name: `n-${method}`, password } })
          expect(reply.status, JSON.stringify(reply.body)).toBe(200)
          expect(reply.body.data.name).toBe(`n-${method}`)
        }
      }))

    stored("an invalid field rejects the whole update", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const { user } = yield* createUser(tenant.api_key)
        const reply = yield* manage(tenant.api_key, "PATCH", `/users/${user.id}`, { user: { name: "ok", role: "root" } })
        expect(reply.status).toBe(422)
        expect(reply.body.error.details).toEqual({ role: ["must be owner, admin, member or viewer"] })
        expect((yield* manage(tenant.api_key, "GET", `/users/${user.id}`)).body.data).toEqual(user)
        expect((yield* auditOf(user.id)).map((a) => a.action)).toEqual(["user.created"])
      }))

    stored("If-Match: a stale tag is 412 with the current one and changes nothing, * always matches", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const { etag, user } = yield* createUser(tenant.api_key)
        const changed = yield* manage(tenant.api_key, "PATCH", `/users/${user.id}`, { user: { name: "one" } }, { "if-match": etag })
        expect(changed.status).toBe(200)
        const current = changed.headers.get("etag")!
        yield* openSessions(user.id, 1)
        for (const method of ["PUT", "PATCH"]) {
          const stale = yield* manage(tenant.api_key, method, `/users/${user.id}`, { user: { status: "inactive" } }, {
            "if-match": etag
          })
          expect(stale.status).toBe(412)
          expect(stale.body.error).toMatchObject({ code: "precondition_failed", details: { current_etag: current } })
        }
        expect(yield* sessionCount(user.id)).toBe(1)
        const staleDelete = yield* manage(tenant.api_key, "DELETE", `/users/${user.id}`, undefined, { "if-match": etag })
        expect(staleDelete.status).toBe(412)
        expect(staleDelete.body.error.details).toEqual({ current_etag: current })
        expect((yield* manage(tenant.api_key, "GET", `/users/${user.id}`)).body.data.name).toBe("one")
        const listed = yield* manage(tenant.api_key, "PUT", `/users/${user.id}`, { user: { name: "two" } }, {
          "if-match": `"nope", ${current}`
        })
        expect(listed.status).toBe(200)
        const star = yield* manage(tenant.api_key, "PATCH", `/users/${user.id}`, { user: { name: "three" } }, { "if-match": "*" })
        expect(star.status).toBe(200)
        expect(star.body.data.name).toBe("three")
        const deleted = yield* manage(tenant.api_key, "DELETE", `/users/${user.id}`, undefined, {
          "if-match": star.headers.get("etag")!
        })
        expect(deleted.status).toBe(204)
      }))

    stored("order: an unknown user is 404 and a stale If-Match 412, whatever the body; then 422", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const { etag, user } = yield* createUser(tenant.api_key)
        const changed = yield* manage(tenant.api_key, "PATCH", `/users/${user.id}`, { user: { name: "one" } })
        const current = changed.headers.get("etag")!
        const invalid = { user: { email: "not an address", role: "root" } }
        for (const method of ["PUT", "PATCH"]) {
          const unknown = yield* manage(tenant.api_key, method, `/users/${crypto.randomUUID()}`, invalid, { "if-match": etag })
          expect(statusAndCode(unknown), method).toEqual({ status: 404, code: "not_found" })
          const stale = yield* manage(tenant.api_key, method, `/users/${user.id}`, invalid, { "if-match": etag })
          expect(stale.status, method).toBe(412)
          expect(stale.body.error, method).toMatchObject({ code: "precondition_failed", details: { current_etag: current } })
          const fresh = yield* manage(tenant.api_key, method, `/users/${user.id}`, invalid, { "if-match": current })
          expect(statusAndCode(fresh), method).toEqual({ status: 422, code: "validation_failed" })
        }
        const after = yield* manage(tenant.api_key, "GET", `/users/${user.id}`)
        expect(after.body.data).toEqual(changed.body.data)
        expect(after.headers.get("etag")).toBe(current)
        expect((yield* auditOf(user.id)).map((a) => a.action)).toEqual(["user.created", "user.updated"])
      }))
  })

  describe("sessions", () => {
    stored("turning a user inactive ends its sessions, and only its own", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const { user } = yield* createUser(tenant.api_key)
        const bystander = yield* createUser(tenant.api_key)
        yield* openSessions(user.id, 2)
        yield* openSessions(bystander.user.id, 1)
        const renamed = yield* manage(tenant.api_key, "PATCH", `/users/${user.id}`, { user: { name: "still here" } })
        expect(renamed.status).toBe(200)
        expect(yield* sessionCount(user.id)).toBe(2)
        const reply = yield* manage(tenant.api_key, "PATCH", `/users/${user.id}`, { user: { status: "inactive" } })
        expect(reply.status).toBe(200)
        expect(reply.body.data.status).toBe("inactive")
        expect(yield* sessionCount(user.id)).toBe(0)
        expect(yield* sessionCount(bystander.user.id)).toBe(1)
        const audit = yield* auditOf(user.id)
        expect(audit.at(-1)).toMatchObject({ action: "user.updated", changes: { status: "inactive" } })
      }))

    stored("delete answers 204, removes the user with its sessions, and is audited", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const { user } = yield* createUser(tenant.api_key)
        yield* openSessions(user.id, 2)
        const reply = yield* manage(tenant.api_key, "DELETE", `/users/${user.id}`)
        expect(reply.status).toBe(204)
        expect(reply.body).toBeNull()
        expect(yield* sessionCount(user.id)).toBe(0)
        expect((yield* manage(tenant.api_key, "GET", `/users/${user.id}`)).status).toBe(404)
        expect((yield* manage(tenant.api_key, "DELETE", `/users/${user.id}`)).status).toBe(404)
        expect((yield* auditOf(user.id)).map((a) => a.action)).toEqual(["user.created", "user.deleted"])
      }))
  })

  describe("tenancy and access", () => {
    stored("another tenant's user is 404 for every route and stays unchanged", () =>
      Effect.gen(function*() {
        const owner = yield* createTenant()
        const stranger = yield* createTenant()
        const { user } = yield* createUser(owner.api_key)
        yield* openSessions(user.id, 1)
        const attempts = [
          manage(stranger.api_key, "GET", `/users/${user.id}`),
          manage(stranger.api_key, "PUT", `/users/${user.id}`, { user: { name: "x" } }),
          manage(stranger.api_key, "PATCH", `/users/${user.id}`, { user: { status: "inactive" } }),
          manage(stranger.api_key, "DELETE", `/users/${user.id}`)
        ]
        for (const attempt of attempts) {
          const reply = yield* attempt
          expect(reply.status).toBe(404)
          expect(reply.body.error).toEqual({ code: "not_found", message: expect.any(String), details: null, request_id: expect.any(String) })
        }
        expect((yield* manage(owner.api_key, "GET", `/users/${user.id}`)).body.data).toEqual(user)
        expect(yield* sessionCount(user.id)).toBe(1)
        expect((yield* manage(stranger.api_key, "GET", "/users")).body.data).toEqual([])
      }))

    stored("a create racing the delete of its tenant is 401 unauthorized, as the key is after it; nothing stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const create = manage(tenant.api_key, "POST", "/users", { user: { email: newEmail(), password: PASSWORD } })
        // The key is checked while the delete is uncommitted; the create meets the delete at the tenant's row.
        const raced = yield* commitWhenWaiting([["DELETE FROM tenants WHERE id = $1", [tenant.id]]], create)
        expect(raced.body).toEqual(envelope("unauthorized"))
        expect(statusAndCode(raced)).toEqual({ status: 401, code: "unauthorized" })
        expect(statusAndCode(yield* create)).toEqual(statusAndCode(raced))
        expect(yield* userCount(tenant.id)).toBe(0)
        expect(yield* query("SELECT id FROM audit_log WHERE tenant_id = $1 AND action = 'user.created'", [tenant.id]))
          .toEqual([])
      }))

    stored("a key without manage is 403 insufficient_scope; a scoped manage key is the audit actor", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const readKey = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, { api_key: { name: "r", scopes: ["read", "write"] } })
        const attempts = [
          manage(readKey.body.data.key, "GET", "/users"),
          manage(readKey.body.data.key, "POST", "/users", { user: { email: newEmail(), password: PASSWORD } }),
          manage(readKey.body.data.key, "DELETE", `/users/${crypto.randomUUID()}`)
        ]
        for (const attempt of attempts) {
          const denied = yield* attempt
          expect(denied.status).toBe(403)
          expect(denied.body.error).toMatchObject({ code: "insufficient_scope", details: { required: ["manage"] } })
        }
        expect(yield* userCount(tenant.id)).toBe(0)
        expect((yield* request("GET", "/api/v1/manage/users")).status).toBe(401)
        const manageKey = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, { api_key: { name: "m", scopes: ["manage"] } })
        const { user } = yield* createUser(manageKey.body.data.key)
        expect(yield* auditOf(user.id)).toMatchObject([{ actor_type: "tenant_api", actor_id: manageKey.body.data.id }])
      }))
  })
})
