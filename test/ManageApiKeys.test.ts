import { describe, expect, layer } from "@effect/vitest"
import { Effect, Exit, Fiber, Option, Scope } from "effect"
import { createHash } from "node:crypto"
import Pg from "pg"
import { envelope, statusAndCode } from "./support/Envelope.js"
import { eventually } from "./support/Eventually.js"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { commitWhenWaiting, holdRow, holdTable, query, serverUrl, TestDatabase } from "./support/TestDatabase.js"
import { admin, createTenant, manage, request, TestNodeLive } from "./support/TestNode.js"

const KEY_FIELDS = ["created_by", "expires_at", "id", "inserted_at", "last_used_at", "name", "prefix", "revoked_at", "scopes",
  "tenant_id", "updated_at"]

interface IssuedKey {
  readonly id: string
  readonly key: string
  readonly [field: string]: unknown
}

/** Issues a scoped key through the management API with `holder` and returns it with its raw value. */
const issue = (holder: string, fields: Record<string, unknown>) =>
  Effect.map(manage(holder, "POST", "/api_keys", { api_key: { name: "key", ...fields } }), (reply) => {
    expect(reply.status).toBe(201)
    return reply.body.data as IssuedKey
  })

const keyCount = (tenantId: string) =>
  Effect.map(
    query<{ n: number }>("SELECT count(*)::int AS n FROM api_keys WHERE tenant_id = $1 AND kind = 'scoped'", [tenantId]),
    (rows) => rows[0]!.n
  )

const lastUsedAt = (id: string) =>
  Effect.map(
    query<{ last_used_at: string | null }>("SELECT last_used_at FROM api_keys WHERE id = $1", [id]),
    (rows) => (rows[0]!.last_used_at === null ? null : Date.parse(rows[0]!.last_used_at))
  )

const inHours = (hours: number) => new Date(Date.now() + hours * 3_600_000).toISOString()
const inOneHour = () => inHours(1)

/** Each of the tenant's keys with the key that issued it (null for none). */
const issuers = (tenantId: string) =>
  Effect.map(
    query<{ id: string; issuer_id: string | null }>("SELECT id, issuer_id FROM api_keys WHERE tenant_id = $1", [tenantId]),
    (rows) => Object.fromEntries(rows.map((row) => [row.id, row.issuer_id]))
  )

const primaryKeyId = (tenantId: string) =>
  Effect.map(
    query<{ id: string }>(
      "SELECT id FROM api_keys WHERE tenant_id = $1 AND kind = 'primary' ORDER BY inserted_at DESC LIMIT 1",
      [tenantId]
    ),
    (rows) => rows[0]!.id
  )

/** Backends of the test's database waiting for another's lock. */
const waitingBackends = Effect.map(
  query<{ n: number }>(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND cardinality(pg_blocking_pids(pid)) > 0"
  ),
  (rows) => rows[0]!.n
)

/** Whether the key authenticates now (every key of these tests holds `read`). */
const works = (key: IssuedKey | string) =>
  Effect.map(tenantApi(typeof key === "string" ? key : key.key, "GET", "/conversations"), (reply) => {
    expect([200, 401]).toContain(reply.status)
    return reply.status === 200
  })

/** Keys issued for the tenant, as their audit rows show (the keys themselves go with a deleted tenant). */
const issuedAudits = (tenantId: string) =>
  query("SELECT id FROM audit_log WHERE tenant_id = $1 AND action = 'api_key.created'", [tenantId])

layer(TestNodeLive(), { excludeTestServices: true })("scoped API keys", (it) => {
  // Tests that read what was stored need direct SQL, which only a PostgreSQL server offers.
  const stored = it.effect.runIf(serverUrl !== undefined)

  describe("issue and read", () => {
    stored("issuing answers 201 with the key once; only its hash is stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const expiresAt = inOneHour()
        const reply = yield* manage(tenant.api_key, "POST", "/api_keys", {
          api_key: { name: " ci ", scopes: ["read", "write", "read"], expires_at: expiresAt, tenant_id: crypto.randomUUID() }
        })
        expect(reply.status).toBe(201)
        const data = reply.body.data
        expect(Object.keys(data).sort()).toEqual([...KEY_FIELDS, "key"].sort())
        expect(data.key).toMatch(/^ck_[0-9A-Za-z]{40}$/)
        expect(data).toMatchObject({
          tenant_id: tenant.id,
          name: "ci",
          prefix: data.key.slice(0, 11),
          scopes: ["read", "write"],
          last_used_at: null,
          revoked_at: null,
          created_by: `tenant_api:${tenant.id}`
        })
        expect(Date.parse(data.expires_at)).toBe(Date.parse(expiresAt))

        const got = yield* manage(tenant.api_key, "GET", `/api_keys/${data.id}`)
        expect(got.status).toBe(200)
        const { key: _key, ...withoutKey } = data
        expect(got.body.data).toEqual(withoutKey)
        const listed = yield* manage(tenant.api_key, "GET", "/api_keys")
        expect(listed.body.data).toEqual([withoutKey])
        expect(JSON.stringify([got.body, listed.body])).not.toContain(data.key)

        const [row] = yield* query<Record<string, unknown> & { key_hash: Buffer }>("SELECT * FROM api_keys WHERE id = $1", [data.id])
        expect(row!.key_hash.equals(createHash("sha256").update(data.key).digest())).toBe(true)
        expect(JSON.stringify(row)).not.toContain(data.key.slice(11))

        const audit = yield* query("SELECT actor_type, actor_id, action FROM audit_log WHERE resource_id = $1", [data.id])
        expect(audit).toEqual([{ actor_type: "tenant_api", actor_id: tenant.id, action: "api_key.created" }])
      }))

    it.effect("the list is the tenant's scoped keys, newest first, revoked ones included", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const other = yield* createTenant()
        const first = yield* issue(tenant.api_key, { scopes: ["read"] })
        const second = yield* issue(tenant.api_key, { scopes: ["write"] })
        yield* issue(other.api_key, { scopes: ["read"] })
        expect((yield* manage(tenant.api_key, "DELETE", `/api_keys/${first.id}`)).status).toBe(204)
        const listed = yield* manage(tenant.api_key, "GET", "/api_keys")
        expect(listed.status).toBe(200)
        expect(listed.body.data.map((k: { id: string }) => k.id)).toEqual([second.id, first.id])
        expect(listed.body.data[1].revoked_at).toMatch(/^\d{4}-\d\d-\d\dT/)
        expect(listed.body.data[0].revoked_at).toBeNull()
        for (const key of listed.body.data) expect(Object.keys(key).sort()).toEqual(KEY_FIELDS)
      }))
  })

  describe("scopes", () => {
    stored("a key can only issue scopes it holds (403 insufficient_scope, nothing stored)", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const manager = yield* issue(tenant.api_key, { scopes: ["manage"] })
        const denied = yield* manage(manager.key, "POST", "/api_keys", { api_key: { name: "r", scopes: ["read"] } })
        expect(denied.status).toBe(403)
        expect(denied.body.error).toEqual({
          code: "insufficient_scope",
          message: expect.any(String),
          details: { required: ["read"] },
          request_id: expect.any(String)
        })
        const partly = yield* manage(manager.key, "POST", "/api_keys", {
          api_key: { name: "rwm", scopes: ["manage", "write", "read"] }
        })
        expect(partly.body.error.details).toEqual({ required: ["write", "read"] })
        expect(yield* keyCount(tenant.id)).toBe(1)

        const child = yield* issue(manager.key, { scopes: ["manage"] })
        expect(child.created_by).toBe(`tenant_api:${manager.id}`)
        const audit = yield* query("SELECT actor_type, actor_id FROM audit_log WHERE resource_id = $1", [child.id])
        expect(audit).toEqual([{ actor_type: "tenant_api", actor_id: manager.id }])
      }))

    stored("a key without manage is 403 insufficient_scope on every route", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const reader = yield* issue(tenant.api_key, { scopes: ["read", "write"] })
        const routes = [
          manage(reader.key, "GET", "/api_keys"),
          manage(reader.key, "POST", "/api_keys", { api_key: { name: "x", scopes: ["read"] } }),
          manage(reader.key, "GET", `/api_keys/${reader.id}`),
          manage(reader.key, "DELETE", `/api_keys/${reader.id}`)
        ]
        for (const route of routes) {
          const reply = yield* route
          expect(reply.status).toBe(403)
          expect(reply.body.error).toMatchObject({ code: "insufficient_scope", details: { required: ["manage"] } })
        }
        expect(yield* keyCount(tenant.id)).toBe(1)
        const [row] = yield* query<{ revoked_at: string | null }>("SELECT revoked_at FROM api_keys WHERE id = $1", [reader.id])
        expect(row!.revoked_at).toBeNull()
      }))
  })

  describe("validation", () => {
    const rejected: ReadonlyArray<readonly [string, Record<string, unknown>, string]> = [
      ["a past expires_at", { scopes: ["read"], expires_at: "2020-01-01T00:00:00Z" }, "expires_at"],
      ["an expires_at of now", { scopes: ["read"], expires_at: new Date().toISOString() }, "expires_at"],
      ["an expires_at that is not ISO 8601", { scopes: ["read"], expires_at: "next tuesday" }, "expires_at"],
      ["an expires_at date without a time", { scopes: ["read"], expires_at: "2999-01-01" }, "expires_at"],
      // Date.parse rolls these over (31 February is 3 March) or ignores what follows the date.
      ["an expires_at on 31 February", { scopes: ["read"], expires_at: "2030-02-31T00:00:00Z" }, "expires_at"],
      ["an expires_at on 29 February of a common year", { scopes: ["read"], expires_at: "2031-02-29T00:00:00Z" }, "expires_at"],
      ["an expires_at in month 13", { scopes: ["read"], expires_at: "2030-13-01T00:00:00Z" }, "expires_at"],
      ["an expires_at at hour 24", { scopes: ["read"], expires_at: "2030-01-01T24:00:00Z" }, "expires_at"],
      ["an expires_at at second 60", { scopes: ["read"], expires_at: "2030-01-01T00:00:60Z" }, "expires_at"],
      ["an expires_at with offset +24:00", { scopes: ["read"], expires_at: "2030-01-01T00:00:00+24:00" }, "expires_at"],
      ["an expires_at with a trailing NUL", { scopes: ["read"], expires_at: "2030-01-01T00:00:00Z\u0000" }, "expires_at"],
      ["an expires_at without an offset", { scopes: ["read"], expires_at: "2030-01-01T00:00:00" }, "expires_at"],
      // Its offset moves it into the year 10000, which no four-digit year can write (a 400 before).
      ["an expires_at past the year 9999", { scopes: ["read"], expires_at: "9999-12-31T23:30:00-01:00" }, "expires_at"],
      ["no scopes", { scopes: [] }, "scopes"],
      ["a missing scopes field", {}, "scopes"],
      ["an unknown scope", { scopes: ["read", "admin"] }, "scopes"],
      ["a blank name", { name: "  ", scopes: ["read"] }, "name"]
    ]
    for (const [label, fields, field] of rejected) {
      stored(`${label} is 422 validation_failed on ${field} and stores nothing`, () =>
        Effect.gen(function*() {
          const tenant = yield* createTenant()
          const reply = yield* manage(tenant.api_key, "POST", "/api_keys", { api_key: { name: "k", ...fields } })
          expect(reply.status).toBe(422)
          expect(reply.body.error.code).toBe("validation_failed")
          expect(Object.keys(reply.body.error.details)).toEqual([field])
          expect(yield* keyCount(tenant.id)).toBe(0)
        }))
    }

    it.effect("an expires_at with an offset, a fraction, no seconds or on a leap day names that instant", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const cases: ReadonlyArray<readonly [string, string]> = [
          ["2032-02-29T00:00:00Z", "2032-02-29T00:00:00.000Z"],
          ["2030-01-01T01:30:00+01:30", "2030-01-01T00:00:00.000Z"],
          ["2030-12-31T23:59:59.123456-23:59", "2031-01-01T23:58:59.123Z"],
          ["2030-06-01T12:30Z", "2030-06-01T12:30:00.000Z"]
        ]
        for (const [sent, instant] of cases) {
          const key = yield* issue(tenant.api_key, { scopes: ["read"], expires_at: sent })
          expect(new Date(key["expires_at"] as string).toISOString(), sent).toBe(instant)
        }
      }))

    stored("the admin API refuses an impossible expires_at too", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const reply = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, {
          api_key: { name: "k", scopes: ["read"], expires_at: "2030-02-31T00:00:00Z" }
        })
        expect(reply.status).toBe(422)
        expect(reply.body.error.code).toBe("validation_failed")
        expect(Object.keys(reply.body.error.details)).toEqual(["expires_at"])
        expect(yield* keyCount(tenant.id)).toBe(0)
      }))

    stored("bad JSON, wrong types and malformed ids are 400 and change nothing", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const broken = yield* request("POST", "/api/v1/manage/api_keys", {
          raw: "{\"api_key\": ",
          headers: { "x-api-key": tenant.api_key }
        })
        expect(broken.status).toBe(400)
        expect(broken.body.error.code).toBe("bad_request")
        const wrongType = yield* manage(tenant.api_key, "POST", "/api_keys", { api_key: { name: "k", scopes: "read" } })
        expect(wrongType.status).toBe(400)
        expect(wrongType.body.error.code).toBe("bad_request")
        expect(yield* keyCount(tenant.id)).toBe(0)
        for (const method of ["GET", "DELETE"]) {
          const badId = yield* manage(tenant.api_key, method, "/api_keys/123")
          expect(badId.status, method).toBe(400)
          expect(badId.body.error.code, method).toBe("bad_request")
        }
      }))
  })

  describe("revocation and use", () => {
    it.effect.runIf(serverUrl !== undefined)("a key whose row is locked still authenticates at once; last_used_at waits", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const issued = yield* issue(tenant.api_key, { scopes: ["read"] })
        const db = yield* TestDatabase
        const holder = new Pg.Client({ connectionString: db.url! })
        yield* Effect.acquireRelease(Effect.promise(() => holder.connect()), () => Effect.promise(() => holder.end()))
        // A change to the key in progress (as a revoke's transaction holds it).
        yield* Effect.promise(() => holder.query("BEGIN"))
        yield* Effect.promise(() => holder.query("SELECT 1 FROM api_keys WHERE id = $1 FOR UPDATE", [issued.id]))
        const reply = yield* manage(issued.key, "GET", "/api_keys").pipe(Effect.timeout("3 seconds"))
        expect(reply.status).toBe(403)
        yield* Effect.promise(() => holder.query("ROLLBACK"))
        const used = yield* query<{ last_used_at: string | null }>("SELECT last_used_at FROM api_keys WHERE id = $1", [issued.id])
        expect(used[0]!.last_used_at).toBeNull()
      }).pipe(Effect.scoped))

    stored("a key whose last_used_at cannot be written still authenticates; the mark is written on a later use", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const key = yield* issue(tenant.api_key, { scopes: ["manage"] })
        // PostgreSQL refuses the mark for this key only, as a failing write of it would.
        const refuse = `refuse_mark_${key.id.replaceAll("-", "")}`
        yield* query(`CREATE FUNCTION ${refuse}() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN RAISE EXCEPTION 'mark refused'; END $$`)
        yield* query(`CREATE TRIGGER ${refuse} BEFORE UPDATE OF last_used_at ON api_keys FOR EACH ROW
          WHEN (OLD.id = '${key.id}') EXECUTE FUNCTION ${refuse}()`)
        const refused = yield* manage(key.key, "GET", "/api_keys").pipe(
          Effect.ensuring(query(`DROP FUNCTION ${refuse}() CASCADE`))
        )
        expect(refused.status).toBe(200)
        expect(yield* lastUsedAt(key.id)).toBeNull()
        expect((yield* manage(key.key, "GET", "/api_keys")).status).toBe(200)
        expect(yield* lastUsedAt(key.id)).not.toBeNull()
      }))

    stored("revoking takes effect at once; the key stays listed with revoked_at", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const doomed = yield* issue(tenant.api_key, { scopes: ["manage"] })
        expect((yield* manage(doomed.key, "GET", "/api_keys")).status).toBe(200)
        const revoked = yield* manage(tenant.api_key, "DELETE", `/api_keys/${doomed.id}`)
        expect(revoked.status).toBe(204)
        expect(revoked.body).toBeNull()
        const after = yield* manage(doomed.key, "GET", "/api_keys")
        expect(after.status).toBe(401)
        expect(after.body.error.code).toBe("unauthorized")
        const got = yield* manage(tenant.api_key, "GET", `/api_keys/${doomed.id}`)
        expect(got.body.data.revoked_at).toMatch(/^\d{4}-\d\d-\d\dT/)
        // Revoking again changes nothing, not even revoked_at.
        expect((yield* manage(tenant.api_key, "DELETE", `/api_keys/${doomed.id}`)).status).toBe(204)
        expect((yield* manage(tenant.api_key, "GET", `/api_keys/${doomed.id}`)).body.data.revoked_at).toBe(got.body.data.revoked_at)
        const audit = yield* query<{ action: string; actor_id: string }>(
          "SELECT action, actor_id FROM audit_log WHERE resource_id = $1 AND action = 'api_key.revoked'",
          [doomed.id]
        )
        expect(audit[0]).toEqual({ action: "api_key.revoked", actor_id: tenant.id })
      }))

    stored("revoking a revoked key is 204 and writes nothing: no updated_at change, no second audit row", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const key = yield* issue(tenant.api_key, { scopes: ["read"] })
        expect((yield* manage(tenant.api_key, "DELETE", `/api_keys/${key.id}`)).status).toBe(204)
        const revoked = (yield* manage(tenant.api_key, "GET", `/api_keys/${key.id}`)).body.data
        yield* Effect.sleep("20 millis")
        expect((yield* manage(tenant.api_key, "DELETE", `/api_keys/${key.id}`)).status).toBe(204)
        expect((yield* admin("DELETE", `/tenants/${tenant.id}/api_keys/${key.id}`)).status).toBe(204)
        expect((yield* manage(tenant.api_key, "GET", `/api_keys/${key.id}`)).body.data).toEqual(revoked)
        const audit = yield* query("SELECT action FROM audit_log WHERE resource_id = $1 AND action = 'api_key.revoked'", [key.id])
        expect(audit).toHaveLength(1)
      }))

    stored("a key can revoke itself", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const self = yield* issue(tenant.api_key, { scopes: ["manage"] })
        expect((yield* manage(self.key, "DELETE", `/api_keys/${self.id}`)).status).toBe(204)
        expect((yield* manage(self.key, "GET", "/api_keys")).status).toBe(401)
      }))

    stored("an expired key is refused", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const key = yield* issue(tenant.api_key, { scopes: ["manage"], expires_at: inOneHour() })
        expect((yield* manage(key.key, "GET", "/api_keys")).status).toBe(200)
        yield* query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [key.id])
        expect((yield* manage(key.key, "GET", "/api_keys")).status).toBe(401)
      }))

    stored("last_used_at is set on use and written at most once a minute", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const key = yield* issue(tenant.api_key, { scopes: ["manage"] })
        expect(yield* lastUsedAt(key.id)).toBeNull()
        yield* manage(key.key, "GET", "/api_keys")
        const first = yield* lastUsedAt(key.id)
        expect(first).not.toBeNull()
        yield* Effect.sleep("20 millis")
        yield* manage(key.key, "GET", "/api_keys")
        expect(yield* lastUsedAt(key.id)).toBe(first)
        const shown = yield* manage(tenant.api_key, "GET", `/api_keys/${key.id}`)
        expect(Date.parse(shown.body.data.last_used_at)).toBe(first)

        yield* query("UPDATE api_keys SET last_used_at = now() - interval '61 seconds' WHERE id = $1", [key.id])
        const aged = yield* lastUsedAt(key.id)
        yield* manage(key.key, "GET", "/api_keys")
        expect(yield* lastUsedAt(key.id)).toBeGreaterThan(aged!)
      }))
  })

  describe("malformed keys", () => {
    const base62 = (n: number) => "aZ09".repeat(Math.ceil(n / 4)).slice(0, n)
    const malformed: ReadonlyArray<readonly [string, string]> = [
      ["too short", `ck_${base62(39)}`],
      ["too long", `ck_${base62(41)}`],
      ["another prefix", `cs_${base62(40)}`],
      ["not base62", `ck_${base62(39)}-`],
      ["10 KB long", `ck_${base62(10_240)}`]
    ]

    stored("a value that is not ck_ and 40 base62 characters is 401 on every way in, without a lookup", () =>
      Effect.gen(function*() {
        const { conversationId } = yield* tenantWithConversation
        const unknown = yield* manage(`ck_${base62(40)}`, "GET", "/api_keys")
        expect(statusAndCode(unknown)).toEqual({ status: 401, code: "unauthorized" })
        // Every lookup waits for this lock, and would end in its timeout (503), not in 401.
        yield* holdTable("api_keys")
        for (const [label, key] of malformed) {
          const replies = [
            yield* manage(key, "GET", "/api_keys"),
            yield* tenantApi(key, "GET", "/conversations"),
            // The lean append route (ADR 0006).
            yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "hi" })
          ]
          for (const reply of replies) {
            expect(statusAndCode(reply), label).toEqual({ status: 401, code: "unauthorized" })
            expect(reply.body.error.message, label).toBe(unknown.body.error.message)
          }
        }
      }).pipe(Effect.scoped))
  })

  describe("issuers", () => {
    stored("a key's expires_at is capped at its issuer's; the issuer is recorded, none for primary and operator keys", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const parent = yield* issue(tenant.api_key, { scopes: ["manage", "read"], expires_at: inOneHour() })
        const later = yield* issue(parent.key, { scopes: ["read"], expires_at: inHours(2) })
        const unlimited = yield* issue(parent.key, { scopes: ["read"] })
        const soonerAt = inHours(0.5)
        const sooner = yield* issue(parent.key, { scopes: ["read"], expires_at: soonerAt })
        expect(later.expires_at).toBe(parent.expires_at)
        expect(unlimited.expires_at).toBe(parent.expires_at)
        expect(Date.parse(sooner.expires_at as string)).toBe(Date.parse(soonerAt))
        expect((yield* manage(tenant.api_key, "GET", `/api_keys/${later.id}`)).body.data.expires_at).toBe(parent.expires_at)
        const [audit] = yield* query<{ changes: { expires_at: string } }>(
          "SELECT changes FROM audit_log WHERE resource_id = $1 AND action = 'api_key.created'",
          [later.id]
        )
        expect(audit!.changes.expires_at).toBe(parent.expires_at)

        const twoHours = inHours(2)
        const byPrimary = yield* issue(tenant.api_key, { scopes: ["read"], expires_at: twoHours })
        expect(Date.parse(byPrimary.expires_at as string)).toBe(Date.parse(twoHours))
        const byOperator = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, { api_key: { name: "ops", scopes: ["read"] } })
        const primary = yield* primaryKeyId(tenant.id)
        expect(yield* issuers(tenant.id)).toEqual({
          [primary]: null,
          [parent.id]: primary,
          [later.id]: parent.id,
          [unlimited.id]: parent.id,
          [sooner.id]: parent.id,
          [byPrimary.id]: primary,
          [byOperator.body.data.id]: null
        })
      }))

    stored("revoking a key revokes the keys it issued and theirs, in one go, each audited; others keep working", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const a = yield* issue(tenant.api_key, { scopes: ["manage", "read"] })
        const b = yield* issue(a.key, { scopes: ["manage", "read"] })
        const c = yield* issue(b.key, { scopes: ["read"] })
        const d = yield* issue(a.key, { scopes: ["read"] })
        const sibling = yield* issue(tenant.api_key, { scopes: ["manage", "read"] })
        const nephew = yield* issue(sibling.key, { scopes: ["read"] })
        expect((yield* manage(tenant.api_key, "DELETE", `/api_keys/${a.id}`)).status).toBe(204)
        for (const key of [a, b, c, d]) expect(yield* works(key)).toBe(false)
        for (const key of [tenant.api_key, sibling, nephew]) expect(yield* works(key)).toBe(true)
        const listed = (yield* manage(tenant.api_key, "GET", "/api_keys")).body.data as ReadonlyArray<{ id: string; revoked_at: string }>
        const revokedAt = Object.fromEntries(listed.map((key) => [key.id, key.revoked_at]))
        expect(revokedAt[a.id]).toMatch(/^\d{4}-/)
        expect([revokedAt[b.id], revokedAt[c.id], revokedAt[d.id]]).toEqual([revokedAt[a.id], revokedAt[a.id], revokedAt[a.id]])

        const revocations = () =>
          query<{ resource_id: string; actor_id: string; changes: unknown }>(
            "SELECT resource_id, actor_id, changes FROM audit_log WHERE tenant_id = $1 AND action = 'api_key.revoked'",
            [tenant.id]
          )
        const audited = yield* revocations()
        expect(audited).toHaveLength(4)
        expect(audited).toEqual(expect.arrayContaining([
          { resource_id: a.id, actor_id: tenant.id, changes: null },
          ...[b, c, d].map((key) => ({ resource_id: key.id, actor_id: tenant.id, changes: { revoked_with: a.id } }))
        ]))
        // Revoking again changes nothing.
        expect((yield* manage(tenant.api_key, "DELETE", `/api_keys/${a.id}`)).status).toBe(204)
        expect(yield* revocations()).toEqual(audited)

        // The admin API's revoke takes the keys issued with it too.
        expect((yield* admin("DELETE", `/tenants/${tenant.id}/api_keys/${sibling.id}`)).status).toBe(204)
        expect(yield* works(nephew)).toBe(false)
      }))

    stored("an issue racing the revoke of a key above its issuer is 401 and leaves no key behind", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const a = yield* issue(tenant.api_key, { scopes: ["manage", "read"] })
        const b = yield* issue(a.key, { scopes: ["manage", "read"] })
        // A share lock on b stops the revoke of a after it has locked a, before it reaches b.
        const holder = yield* Scope.make()
        yield* Effect.addFinalizer(() => Scope.close(holder, Exit.void))
        yield* holdRow("api_keys", b.id, "FOR SHARE").pipe(Scope.extend(holder))
        const revoke = yield* Effect.fork(manage(tenant.api_key, "DELETE", `/api_keys/${a.id}`))
        yield* eventually(waitingBackends, (n) => n === 1, { what: "the revoke waiting at b" })
        const late = yield* Effect.fork(manage(b.key, "POST", "/api_keys", { api_key: { name: "late", scopes: ["read"] } }))
        // The issue either waits for the revoke as well, or has answered.
        yield* eventually(
          Effect.zip(waitingBackends, Fiber.poll(late)),
          ([n, answered]) => n === 2 || Option.isSome(answered),
          { what: "the issue waiting or answered" }
        )
        yield* Scope.close(holder, Exit.void)
        expect((yield* Fiber.join(revoke)).status).toBe(204)
        expect(statusAndCode(yield* Fiber.join(late))).toEqual({ status: 401, code: "unauthorized" })
        expect(yield* keyCount(tenant.id)).toBe(2)
      }).pipe(Effect.scoped))

    stored("rotating the primary key leaves the keys it issued working after its grace; one issued in the grace ends with it", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const before = yield* issue(tenant.api_key, { scopes: ["manage", "read"] })
        const rotated = yield* admin("POST", `/tenants/${tenant.id}/rotate_api_key`)
        expect(rotated.status).toBe(200)
        const [old] = yield* query<{ id: string; expires_at: string }>(
          "SELECT id, expires_at FROM api_keys WHERE tenant_id = $1 AND kind = 'primary' AND expires_at IS NOT NULL",
          [tenant.id]
        )
        const during = yield* issue(tenant.api_key, { scopes: ["read"] })
        expect(during.expires_at).toBe(old!.expires_at)
        // The grace ends.
        yield* query("UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1", [old!.id])
        expect(yield* works(tenant.api_key)).toBe(false)
        expect(yield* works(before)).toBe(true)
        expect((yield* issuers(tenant.id))[before.id]).toBe(old!.id)
      }))
  })

  describe("tenancy", () => {
    stored("an issue racing the delete of the tenant is 401 unauthorized, as the key is after it; nothing stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const create = manage(tenant.api_key, "POST", "/api_keys", { api_key: { name: "k", scopes: ["read"] } })
        // The key is checked while the delete is uncommitted; the issue meets the delete at the tenant's row.
        const raced = yield* commitWhenWaiting([["DELETE FROM tenants WHERE id = $1", [tenant.id]]], create)
        expect(raced.body).toEqual(envelope("unauthorized"))
        expect(statusAndCode(raced)).toEqual({ status: 401, code: "unauthorized" })
        expect(statusAndCode(yield* create)).toEqual(statusAndCode(raced))
        expect(yield* issuedAudits(tenant.id)).toEqual([])
      }))

    stored("another tenant's key is 404 and keeps working; so is the primary key", () =>
      Effect.gen(function*() {
        const owner = yield* createTenant()
        const stranger = yield* createTenant()
        const key = yield* issue(owner.api_key, { scopes: ["manage"] })
        for (const method of ["GET", "DELETE"]) {
          const reply = yield* manage(stranger.api_key, method, `/api_keys/${key.id}`)
          expect(reply.status, method).toBe(404)
          expect(reply.body.error.code, method).toBe("not_found")
        }
        expect((yield* manage(key.key, "GET", "/api_keys")).status).toBe(200)
        const [primary] = yield* query<{ id: string }>("SELECT id FROM api_keys WHERE tenant_id = $1 AND kind = 'primary'", [
          owner.id
        ])
        expect((yield* manage(owner.api_key, "GET", `/api_keys/${primary!.id}`)).status).toBe(404)
        expect((yield* manage(owner.api_key, "DELETE", `/api_keys/${primary!.id}`)).status).toBe(404)
        expect((yield* manage(owner.api_key, "GET", "/api_keys")).status).toBe(200)
        expect((yield* manage(owner.api_key, "GET", `/api_keys/${crypto.randomUUID()}`)).status).toBe(404)
      }))
  })

  describe("admin API", () => {
    stored("an issue racing the delete of the tenant is 404 not_found, as for an unknown tenant; nothing stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const create = admin("POST", `/tenants/${tenant.id}/api_keys`, { api_key: { name: "k", scopes: ["read"] } })
        // The tenant is found while the delete is uncommitted; the issue meets the delete at the tenant's row.
        const raced = yield* commitWhenWaiting([["DELETE FROM tenants WHERE id = $1", [tenant.id]]], create)
        expect(raced.body).toEqual(envelope("not_found"))
        expect(statusAndCode(raced)).toEqual({ status: 404, code: "not_found" })
        expect(statusAndCode(yield* create)).toEqual(statusAndCode(raced))
        expect(yield* issuedAudits(tenant.id)).toEqual([])
      }))

    stored("the operator issues any scopes, lists without the key and revokes at once", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const issued = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, {
          api_key: { name: "ops", scopes: ["read", "write", "manage"] }
        })
        expect(issued.status).toBe(201)
        const key = issued.body.data
        expect(key).toMatchObject({ tenant_id: tenant.id, scopes: ["read", "write", "manage"], created_by: "admin_api:admin" })
        expect(key.key).toMatch(/^ck_[0-9A-Za-z]{40}$/)
        expect((yield* manage(key.key, "GET", "/api_keys")).status).toBe(200)

        const listed = yield* admin("GET", `/tenants/${tenant.id}/api_keys`)
        expect(listed.status).toBe(200)
        expect(listed.body.data.map((k: { id: string }) => k.id)).toEqual([key.id])
        expect(listed.body.data[0].key).toBeUndefined()

        const revoked = yield* admin("DELETE", `/tenants/${tenant.id}/api_keys/${key.id}`)
        expect(revoked.status).toBe(204)
        expect((yield* manage(key.key, "GET", "/api_keys")).status).toBe(401)
        expect((yield* admin("GET", `/tenants/${tenant.id}/api_keys`)).body.data[0].revoked_at).toMatch(/^\d{4}-/)
        const audit = yield* query("SELECT actor_type, actor_id, action FROM audit_log WHERE resource_id = $1 ORDER BY action", [
          key.id
        ])
        expect(audit).toEqual([
          { actor_type: "admin_api", actor_id: "admin", action: "api_key.created" },
          { actor_type: "admin_api", actor_id: "admin", action: "api_key.revoked" }
        ])
      }))

    stored("unknown tenants and other tenants' keys are 404; invalid input stores nothing", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const other = yield* createTenant()
        const unknown = crypto.randomUUID()
        expect((yield* admin("GET", `/tenants/${unknown}/api_keys`)).status).toBe(404)
        expect((yield* admin("POST", `/tenants/${unknown}/api_keys`, { api_key: { name: "k", scopes: ["read"] } })).status)
          .toBe(404)
        expect((yield* admin("DELETE", `/tenants/${unknown}/api_keys/${crypto.randomUUID()}`)).status).toBe(404)

        const key = yield* issue(tenant.api_key, { scopes: ["manage"] })
        expect((yield* admin("DELETE", `/tenants/${other.id}/api_keys/${key.id}`)).status).toBe(404)
        expect((yield* manage(key.key, "GET", "/api_keys")).status).toBe(200)

        const invalid = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, {
          api_key: { name: "k", scopes: ["root"], expires_at: "2001-01-01T00:00:00Z" }
        })
        expect(invalid.status).toBe(422)
        expect(Object.keys(invalid.body.error.details).sort()).toEqual(["expires_at", "scopes"])
        expect((yield* admin("GET", `/tenants/not-a-uuid/api_keys`)).status).toBe(400)
        expect((yield* admin("DELETE", `/tenants/${tenant.id}/api_keys/not-a-uuid`)).status).toBe(400)
        expect(yield* keyCount(tenant.id)).toBe(1)
      }))
  })
})
