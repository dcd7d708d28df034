import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { createChannel, ISO_MICROS, manage, sha256Hex, storedCounts } from "./support/ManageClient.js"
import { statusAndCode } from "./support/Envelope.js"
import { commitWhenWaiting, holdRow, query, serverUrl } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

const keysOf = (channelId: string) => `/channels/${channelId}/publishable_keys`

/** A key named `web` on the channel, with the given allowed origins; the created resource. */
const createKey = (apiKey: string, channelId: string, origins: ReadonlyArray<string> = ["https://a.example.com"]) =>
  Effect.map(
    manage(apiKey, "POST", keysOf(channelId), { publishable_key: { name: "web", allowed_origins: origins } }),
    (reply) => reply.body.data
  )

/** The stored hash of a key, as hex; undefined when the key is gone. */
const storedHash = (id: string) =>
  query<{ hash: string }>("SELECT encode(key_hash, 'hex') AS hash FROM publishable_keys WHERE id = $1", [id]).pipe(
    Effect.map((rows) => rows[0]?.hash)
  )

layer(TestNodeLive(), { excludeTestServices: true })("management API: publishable keys", (it) => {
  // These checks read the database directly, which needs a PostgreSQL server.
  const sqlIt = it.effect.runIf(serverUrl !== undefined)

  describe("lifecycle", () => {
    sqlIt("create is 201 with the key once; only its hash is stored; origins are lower-cased", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key)
        const reply = yield* manage(tenant.api_key, "POST", keysOf(channel.id), {
          publishable_key: {
            name: " Website ",
            allowed_origins: ["HTTPS://App.Example.com", "http://localhost:3000", "https://app.example.com"],
            status: "disabled",
            channel_id: crypto.randomUUID()
          }
        })
        expect(reply.status).toBe(201)
        const { key, ...shown } = reply.body.data
        expect(key).toMatch(/^pk_[0-9A-Za-z]{32}$/)
        expect(shown).toEqual({
          id: expect.any(String),
          channel_id: channel.id,
          name: "Website",
          prefix: key.slice(0, 11),
          allowed_origins: ["https://app.example.com", "http://localhost:3000"],
          status: "active",
          inserted_at: expect.stringMatching(ISO_MICROS),
          updated_at: expect.stringMatching(ISO_MICROS)
        })
        expect(yield* storedHash(shown.id)).toBe(sha256Hex(key))
        const row = yield* query<{ row: string }>("SELECT row_to_json(k)::text AS row FROM publishable_keys k WHERE id = $1", [
          shown.id
        ])
        expect(row[0]!.row).not.toContain(key)

        const listed = yield* manage(tenant.api_key, "GET", keysOf(channel.id))
        expect(listed.status).toBe(200)
        expect(listed.body.data).toEqual([shown])
        const audits = yield* query<{ action: string; actor_id: string; changes: string }>(
          "SELECT action, actor_id, changes::text FROM audit_log WHERE resource_id = $1",
          [shown.id]
        )
        expect(audits).toEqual([{ action: "publishable_key.created", actor_id: tenant.id, changes: expect.any(String) }])
        expect(audits[0]!.changes).not.toContain(key)
      }))

    sqlIt("PATCH changes name, allowed_origins and status; only sent fields", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key)
        const created = yield* createKey(tenant.api_key, channel.id)
        const disabled = yield* manage(tenant.api_key, "PATCH", `${keysOf(channel.id)}/${created.id}`, {
          publishable_key: { status: "disabled" }
        })
        expect(disabled.status).toBe(200)
        expect(disabled.body.data).toMatchObject({ name: "web", allowed_origins: ["https://a.example.com"], status: "disabled" })
        expect(disabled.body.data.key).toBeUndefined()
        const renamed = yield* manage(tenant.api_key, "PATCH", `${keysOf(channel.id)}/${created.id}`, {
          publishable_key: { name: "site", allowed_origins: ["https://B.example.com:8443"], status: "active", prefix: "pk_mine" }
        })
        expect(renamed.body.data).toMatchObject({
          name: "site",
          allowed_origins: ["https://b.example.com:8443"],
          status: "active",
          prefix: created.prefix
        })
        const empty = yield* manage(tenant.api_key, "PATCH", `${keysOf(channel.id)}/${created.id}`, { publishable_key: {} })
        expect(empty.status).toBe(200)
        expect(empty.body.data).toEqual(renamed.body.data)
        // A repeat of the same change writes nothing: same updated_at, no second audit entry.
        yield* Effect.sleep("20 millis")
        const repeated = yield* manage(tenant.api_key, "PATCH", `${keysOf(channel.id)}/${created.id}`, {
          publishable_key: { name: "site", allowed_origins: ["https://b.example.com:8443"] }
        })
        expect(repeated.body.data).toEqual(renamed.body.data)
        const audits = yield* query("SELECT 1 FROM audit_log WHERE resource_id = $1 AND action = 'publishable_key.updated'", [created.id])
        expect(audits).toHaveLength(2)
        expect(yield* storedHash(created.id)).toBe(sha256Hex(created.key))
      }))

    sqlIt("rotate returns a new key once; the old hash is gone at once", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key)
        const created = yield* createKey(tenant.api_key, channel.id, [])
        const rotated = yield* manage(tenant.api_key, "POST", `${keysOf(channel.id)}/${created.id}/rotate`)
        expect(rotated.status).toBe(200)
        const { key, ...shown } = rotated.body.data
        expect(key).toMatch(/^pk_[0-9A-Za-z]{32}$/)
        expect(key).not.toBe(created.key)
        expect(shown).toMatchObject({ id: created.id, name: "web", prefix: key.slice(0, 11) })
        expect(yield* storedHash(created.id)).toBe(sha256Hex(key))
        const old = yield* query("SELECT id FROM publishable_keys WHERE key_hash = decode($1, 'hex')", [sha256Hex(created.key)])
        expect(old).toEqual([])
        const listed = yield* manage(tenant.api_key, "GET", keysOf(channel.id))
        expect(listed.body.data).toEqual([shown])
      }))

    sqlIt("DELETE is 204 and the key is gone; deleting the channel removes its keys", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key)
        const created = yield* createKey(tenant.api_key, channel.id)
        const removed = yield* manage(tenant.api_key, "DELETE", `${keysOf(channel.id)}/${created.id}`)
        expect(removed.status).toBe(204)
        expect(yield* storedHash(created.id)).toBeUndefined()
        expect((yield* manage(tenant.api_key, "GET", keysOf(channel.id))).body.data).toEqual([])
        for (const [method, suffix] of [["DELETE", ""], ["PATCH", ""], ["POST", "/rotate"]] as const) {
          const reply = yield* manage(tenant.api_key, method, `${keysOf(channel.id)}/${created.id}${suffix}`, method === "PATCH"
            ? { publishable_key: { name: "x" } }
            : undefined)
          expect(reply.status, method + suffix).toBe(404)
        }
        const kept = (yield* manage(tenant.api_key, "POST", keysOf(channel.id), {
          publishable_key: { name: "kept", allowed_origins: [] }
        })).body.data
        expect((yield* manage(tenant.api_key, "DELETE", `/channels/${channel.id}`)).status).toBe(204)
        expect(yield* storedHash(kept.id)).toBeUndefined()
        expect((yield* manage(tenant.api_key, "GET", keysOf(channel.id))).status).toBe(404)
        const actions = yield* query<{ action: string }>(
          "SELECT action FROM audit_log WHERE resource_id = $1 ORDER BY inserted_at",
          [created.id]
        )
        expect(actions.map((a) => a.action)).toEqual(["publishable_key.created", "publishable_key.deleted"])
      }))
  })

  describe("validation and scoping", () => {
    sqlIt("a create racing the delete of its channel is 404, of its tenant 401, as after them; nothing stored", () =>
      Effect.gen(function*() {
        for (const [table, status, code] of [["channels", 404, "not_found"], ["tenants", 401, "unauthorized"]] as const) {
          const tenant = yield* createTenant()
          const channel = yield* createChannel(tenant.api_key)
          const before = yield* storedCounts(tenant.id)
          const create = manage(tenant.api_key, "POST", keysOf(channel.id), { publishable_key: { name: "web" } })
          // The key is checked while the delete is uncommitted; the create meets the delete at the locked row.
          const raced = yield* commitWhenWaiting(
            [[`DELETE FROM ${table} WHERE id = $1`, [table === "channels" ? channel.id : tenant.id]]],
            create
          )
          expect(statusAndCode(raced), table).toEqual({ status, code })
          expect(statusAndCode(yield* create), table).toEqual(statusAndCode(raced))
          expect(yield* storedCounts(tenant.id), table).toEqual({ ...before, channels: before.channels - 1 })
        }
      }))

    it.scoped.runIf(serverUrl !== undefined)("listing a channel's keys does not wait behind a write of the channel", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key)
        yield* createKey(tenant.api_key, channel.id)
        // A channel update in flight holds the row until it commits; a read needs no lock on it.
        yield* holdRow("channels", channel.id)
        const listed = yield* manage(tenant.api_key, "GET", keysOf(channel.id)).pipe(Effect.timeout("5 seconds"))
        expect(listed.status).toBe(200)
        expect(listed.body.data.map((k: { name: string }) => k.name)).toEqual(["web"])
      }))

    sqlIt("a missing name, a wildcard or any non-origin is 422 and stores nothing", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key)
        const refused = (body: unknown) =>
          Effect.gen(function*() {
            const before = yield* storedCounts(tenant.id)
            const reply = yield* manage(tenant.api_key, "POST", keysOf(channel.id), { publishable_key: body })
            expect(reply.status, JSON.stringify(body)).toBe(422)
            expect(reply.body.error.code).toBe("validation_failed")
            expect(yield* storedCounts(tenant.id)).toEqual(before)
            return reply.body.error.details as Record<string, Array<string>>
          })
        expect(yield* refused({ allowed_origins: ["https://a.example.com"] })).toEqual({ name: ["is required"] })
        expect(yield* refused({ name: "  " })).toEqual({ name: ["is required"] })
        for (
          const origin of [
            "*",
            "https://*.example.com",
            "https://a.example.com/",
            "https://a.example.com/path",
            "https://a.example.com?x=1",
            "https://a.example.com#x",
            "ftp://a.example.com",
            "a.example.com",
            "https://user@a.example.com",
            "https://a.example.com:99999",
            "null",
            ""
          ]
        ) {
          expect(yield* refused({ name: "web", allowed_origins: ["https://ok.example.com", origin] }), origin).toEqual({
            allowed_origins: [expect.stringContaining(JSON.stringify(origin))]
          })
        }
        const tooMany = Array.from({ length: 101 }, (_, i) => `https://a${i}.example.com`)
        expect(yield* refused({ name: "web", allowed_origins: tooMany })).toHaveProperty("allowed_origins")

        const created = yield* createKey(tenant.api_key, channel.id)
        const before = yield* manage(tenant.api_key, "GET", keysOf(channel.id))
        for (const body of [{ status: "revoked" }, { allowed_origins: ["*"] }, { name: "" }]) {
          const reply = yield* manage(tenant.api_key, "PATCH", `${keysOf(channel.id)}/${created.id}`, { publishable_key: body })
          expect(reply.status, JSON.stringify(body)).toBe(422)
          expect(Object.keys(reply.body.error.details)).toEqual(Object.keys(body))
        }
        expect((yield* manage(tenant.api_key, "GET", keysOf(channel.id))).body).toEqual(before.body)
      }))

    sqlIt("an unknown channel or key is 404 whatever the body, and nothing is stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key)
        const before = yield* storedCounts(tenant.id)
        const invalid = { publishable_key: { name: "", allowed_origins: ["*"], status: "revoked" } }
        const attempts = [
          ["POST", keysOf(crypto.randomUUID())],
          ["PATCH", `${keysOf(channel.id)}/${crypto.randomUUID()}`],
          ["PATCH", `${keysOf(crypto.randomUUID())}/${crypto.randomUUID()}`]
        ] as const
        for (const [method, path] of attempts) {
          const reply = yield* manage(tenant.api_key, method, path, invalid)
          expect(statusAndCode(reply), `${method} ${path}`).toEqual({ status: 404, code: "not_found" })
        }
        expect(yield* storedCounts(tenant.id)).toEqual(before)
      }))

    it.effect("wrong JSON types are 400 and malformed ids are 400", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key)
        for (const body of [{ name: 5 }, { name: "x", allowed_origins: "https://a.example.com" }, { name: "x", allowed_origins: [1] }]) {
          const reply = yield* manage(tenant.api_key, "POST", keysOf(channel.id), { publishable_key: body })
          expect(reply.status, JSON.stringify(body)).toBe(400)
          expect(reply.body.error.code).toBe("bad_request")
        }
        expect((yield* manage(tenant.api_key, "POST", keysOf(channel.id), { name: "unwrapped" })).status).toBe(400)
        expect((yield* manage(tenant.api_key, "GET", keysOf("not-a-uuid"))).status).toBe(400)
        expect((yield* manage(tenant.api_key, "DELETE", `${keysOf(channel.id)}/not-a-uuid`)).status).toBe(400)
        expect((yield* manage(tenant.api_key, "GET", keysOf(channel.id))).body.data).toEqual([])
      }))

    sqlIt("keys of another tenant's channel are 404 on every route, and nothing changes", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const other = yield* createTenant()
        const theirs = yield* createChannel(other.api_key)
        const theirKey = (yield* manage(other.api_key, "POST", keysOf(theirs.id), {
          publishable_key: { name: "theirs", allowed_origins: ["https://them.example.com"] }
        })).body.data
        const mine = yield* createChannel(tenant.api_key)
        const before = yield* storedCounts(other.id)
        const attempts = [
          ["GET", keysOf(theirs.id), undefined],
          ["POST", keysOf(theirs.id), { publishable_key: { name: "x", allowed_origins: [] } }],
          ["PATCH", `${keysOf(theirs.id)}/${theirKey.id}`, { publishable_key: { status: "disabled" } }],
          ["POST", `${keysOf(theirs.id)}/${theirKey.id}/rotate`, undefined],
          ["DELETE", `${keysOf(theirs.id)}/${theirKey.id}`, undefined],
          // Their key through my own channel is no better.
          ["PATCH", `${keysOf(mine.id)}/${theirKey.id}`, { publishable_key: { status: "disabled" } }],
          ["POST", `${keysOf(mine.id)}/${theirKey.id}/rotate`, undefined],
          ["DELETE", `${keysOf(mine.id)}/${theirKey.id}`, undefined],
          ["GET", keysOf(crypto.randomUUID()), undefined],
          ["POST", keysOf(crypto.randomUUID()), { publishable_key: { name: "x", allowed_origins: [] } }]
        ] as const
        for (const [method, path, body] of attempts) {
          const reply = yield* manage(tenant.api_key, method, path, body)
          expect(reply.status, `${method} ${path}`).toBe(404)
          expect(reply.body.error.code).toBe("not_found")
        }
        expect(yield* storedCounts(other.id)).toEqual(before)
        expect(yield* storedHash(theirKey.id)).toBe(sha256Hex(theirKey.key))
        const theirList = yield* manage(other.api_key, "GET", keysOf(theirs.id))
        expect(theirList.body.data).toMatchObject([{ id: theirKey.id, status: "active" }])
      }))
  })
})
