import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { statusAndCode } from "./support/Envelope.js"
import { commitWhenWaiting, query, serverUrl } from "./support/TestDatabase.js"
import { createChannel, HOOK_URL, ISO_MICROS, manage, sha256Hex, storedCounts } from "./support/ManageClient.js"
import { admin, createTenant, request, TestNodeLive } from "./support/TestNode.js"

const envelope = (code: string) => ({
  error: { code, message: expect.any(String), details: null, request_id: expect.any(String) }
})

const DEFAULT_POLICY = { max_attempts: 8, backoff: "exponential", base_ms: 1000, max_ms: 300000, timeout_ms: 10000 }

/** The stored (unredacted) config of a channel. */
const storedConfig = (id: string) =>
  query<{ config: Record<string, any> }>("SELECT config FROM channels WHERE id = $1", [id]).pipe(
    Effect.map((rows) => rows[0]!.config)
  )

/** Sends a create that must be refused with `status`; proves that nothing was stored. */
const refusedCreate = (tenant: { id: string; api_key: string }, channel: unknown, status: number) =>
  Effect.gen(function*() {
    const before = yield* storedCounts(tenant.id)
    const reply = yield* manage(tenant.api_key, "POST", "/channels", { channel })
    expect(reply.status, JSON.stringify(reply.body)).toBe(status)
    expect(yield* storedCounts(tenant.id)).toEqual(before)
    return reply
  })

/** A create refused with 422 `validation_failed`; returns the per-field details. */
const invalidCreate = (tenant: { id: string; api_key: string }, channel: unknown) =>
  Effect.map(refusedCreate(tenant, channel, 422), (reply) => {
    expect(reply.body.error.code).toBe("validation_failed")
    return reply.body.error.details as Record<string, Array<string>>
  })

const webhook = (config: Record<string, unknown>) => ({ name: "hook", type: "webhook", config: { url: HOOK_URL, ...config } })

layer(TestNodeLive(), { excludeTestServices: true })("management API: channels", (it) => {
  // Most checks read the database directly, which needs a PostgreSQL server.
  const sqlIt = it.effect.runIf(serverUrl !== undefined)

  describe("create and read", () => {
    sqlIt("create is 201 with defaults, an ETag and the secret once; only the secret's hash is stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const other = yield* createTenant()
        const sentId = crypto.randomUUID()
        const reply = yield* manage(tenant.api_key, "POST", "/channels", {
          channel: {
            name: "  Support hook ",
            config: { url: HOOK_URL },
            id: sentId,
            tenant_id: other.id,
            secret: "cs_chosen",
            circuit_state: "open",
            inserted_at: "2000-01-01T00:00:00Z"
          }
        })
        expect(reply.status).toBe(201)
        const { secret, ...channel } = reply.body.data
        expect(secret).toMatch(/^cs_[0-9A-Za-z]{40}$/)
        expect(channel).toEqual({
          id: expect.any(String),
          tenant_id: tenant.id,
          name: "Support hook",
          type: "webhook",
          mode: "duplex",
          status: "active",
          require_signature: true,
          config: { url: HOOK_URL, method: "POST", headers: {}, connect_timeout: 5000, max_response_bytes: 1048576 },
          transformations: [],
          retry_policy: DEFAULT_POLICY,
          rate_limit: null,
          circuit_state: "closed",
          inserted_at: expect.stringMatching(ISO_MICROS),
          updated_at: expect.stringMatching(ISO_MICROS)
        })
        expect(channel.id).not.toBe(sentId)
        const etag = reply.headers.get("etag")
        expect(etag).toMatch(/^".+"$/)

        const got = yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)
        expect(got.status).toBe(200)
        expect(got.body.data).toEqual(channel)
        // The create's tag names the channel without its secret, so it works for If-Match.
        expect(got.headers.get("etag")).toBe(etag)

        const rows = yield* query<{ hash: string; row: string }>(
          "SELECT encode(secret_hash, 'hex') AS hash, row_to_json(c)::text AS row FROM channels c WHERE id = $1",
          [channel.id]
        )
        expect(rows).toHaveLength(1)
        expect(rows[0]!.hash).toBe(sha256Hex(secret))
        expect(rows[0]!.row).not.toContain(secret)
        const audits = yield* query<{ actor_type: string; actor_id: string; changes: string }>(
          "SELECT actor_type, actor_id, changes::text FROM audit_log WHERE resource_id = $1 AND action = 'channel.created'",
          [channel.id]
        )
        expect(audits).toEqual([{ actor_type: "tenant_api", actor_id: tenant.id, changes: expect.any(String) }])
        expect(audits[0]!.changes).not.toContain(secret)
      }))

    it.effect("the list has the tenant's channels sorted by name, never another tenant's, without secrets", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const other = yield* createTenant()
        yield* createChannel(tenant.api_key, { name: "b-channel" })
        yield* createChannel(tenant.api_key, { name: "a-channel", type: "echo", config: {} })
        yield* createChannel(tenant.api_key, { name: "c-channel", type: "websocket", config: {} })
        yield* createChannel(other.api_key, { name: "a-other" })
        const reply = yield* manage(tenant.api_key, "GET", "/channels")
        expect(reply.status).toBe(200)
        expect(reply.body.data.map((c: { name: string }) => c.name)).toEqual(["a-channel", "b-channel", "c-channel"])
        for (const channel of reply.body.data) {
          expect(channel.secret).toBeUndefined()
          expect(channel.tenant_id).toBe(tenant.id)
        }
        // Lists carry an ETag too (server-apis.md conventions): the same while the list is the same.
        const tag = reply.headers.get("etag")
        expect(tag).toMatch(/^".+"$/)
        expect((yield* manage(tenant.api_key, "GET", "/channels")).headers.get("etag")).toBe(tag)
        yield* createChannel(tenant.api_key, { name: "d-channel", type: "echo", config: {} })
        expect((yield* manage(tenant.api_key, "GET", "/channels")).headers.get("etag")).not.toBe(tag)
        for (const path of ["/users", "/settings"]) {
          expect((yield* manage(tenant.api_key, "GET", path)).headers.get("etag"), path).toMatch(/^".+"$/)
        }
        expect((yield* admin("GET", "/tenants")).headers.get("etag")).toMatch(/^".+"$/)
      }))

    sqlIt("the list stops at 1000 channels", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        yield* query(
          `INSERT INTO channels (id, tenant_id, name, type, secret_hash)
           SELECT gen_random_uuid(), $1, 'ch-' || lpad(i::text, 4, '0'), 'echo', sha256(gen_random_uuid()::text::bytea)
           FROM generate_series(1, 1001) AS i`,
          [tenant.id]
        )
        const reply = yield* manage(tenant.api_key, "GET", "/channels")
        expect(reply.status).toBe(200)
        expect(reply.body.data).toHaveLength(1000)
        expect(reply.body.data[0].name).toBe("ch-0001")
        expect(reply.body.data[999].name).toBe("ch-1000")
        // Rows written without a policy read it as the defaults.
        expect(reply.body.data[0].retry_policy).toEqual(DEFAULT_POLICY)
      }))

    it.effect("every channel type is accepted with its config", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const accepted = [
          { type: "echo", config: {} },
          { type: "websocket", config: { anything: ["goes"] } },
          { type: "http_pull", config: {} },
          { type: "email", config: { to: "ops@example.com" }, mode: "outbound" },
          {
            type: "meta_messaging",
            mode: "inbound",
            config: { access_token: "at", verify_token: "vt", app_secret: "as", phone_number_id: "1", business_account_id: "2" }
          },
          { type: "nats", config: { url: "nats://127.0.0.1:4222", subject: "chat.out" } },
          { type: "nats", config: { url: "tls://nats.example.com:4222", subject: "chat" } },
          { type: "webhook", config: { url: "https://example.com/hook", method: "put", headers: { "X-Custom": "1" } } }
        ]
        for (const fields of accepted) {
          const channel = yield* createChannel(tenant.api_key, fields)
          expect(channel.type).toBe(fields.type)
          expect(channel.mode).toBe(fields.mode ?? "duplex")
        }
        const put = yield* createChannel(tenant.api_key, { config: { url: HOOK_URL, method: "put", receive_timeout: 60000 } })
        expect(put.config).toMatchObject({ method: "PUT", receive_timeout: 60000 })
      }))

    it.effect("another tenant's channel is 404 like a missing one on every route; a malformed id is 400", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const other = yield* createTenant()
        const theirs = yield* createChannel(other.api_key)
        for (const id of [theirs.id, crypto.randomUUID()]) {
          for (const [method, path, body] of [
            ["GET", `/channels/${id}`, undefined],
            ["PATCH", `/channels/${id}`, { channel: { name: "mine now" } }],
            ["PUT", `/channels/${id}`, { channel: { name: "mine now" } }],
            ["DELETE", `/channels/${id}`, undefined],
            ["POST", `/channels/${id}/rotate_secret`, undefined]
          ] as const) {
            const reply = yield* manage(tenant.api_key, method, path, body)
            expect(reply.status, `${method} ${path}`).toBe(404)
            expect(reply.body).toEqual(envelope("not_found"))
          }
        }
        const still = yield* manage(other.api_key, "GET", `/channels/${theirs.id}`)
        expect(still.body.data.name).toBe(theirs["name"])
        for (const [method, path] of [["GET", "/channels/nope"], ["DELETE", "/channels/123"], ["POST", "/channels/x/rotate_secret"]]) {
          const reply = yield* manage(tenant.api_key, method!, path!)
          expect(reply.status).toBe(400)
          expect(reply.body).toEqual(envelope("bad_request"))
        }
      }))

    sqlIt("a create racing the delete of its tenant is 401 unauthorized, as the key is after it; nothing stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const before = yield* storedCounts(tenant.id)
        const create = manage(tenant.api_key, "POST", "/channels", { channel: webhook({}) })
        // The key is checked while the delete is uncommitted; the create meets the delete at the tenant's row.
        const raced = yield* commitWhenWaiting([["DELETE FROM tenants WHERE id = $1", [tenant.id]]], create)
        expect(raced.body).toEqual(envelope("unauthorized"))
        expect(statusAndCode(raced)).toEqual({ status: 401, code: "unauthorized" })
        expect(statusAndCode(yield* create)).toEqual(statusAndCode(raced))
        expect(yield* storedCounts(tenant.id)).toEqual(before)
      }))

    sqlIt("a create racing the deactivation of its tenant is 401 unauthorized, as the key is after it; nothing stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const before = yield* storedCounts(tenant.id)
        const create = manage(tenant.api_key, "POST", "/channels", { channel: webhook({}) })
        // As the admin API changes a tenant: its row locked first, then updated.
        const raced = yield* commitWhenWaiting([
          ["SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE", [tenant.id]],
          ["UPDATE tenants SET status = 'inactive' WHERE id = $1", [tenant.id]]
        ], create)
        expect(statusAndCode(raced)).toEqual({ status: 401, code: "unauthorized" })
        expect(statusAndCode(yield* create)).toEqual(statusAndCode(raced))
        expect(yield* storedCounts(tenant.id)).toEqual(before)
        // The operator may still act on an inactive tenant.
        const issued = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, { api_key: { name: "ops", scopes: ["read"] } })
        expect(issued.status).toBe(201)
      }))

    it.effect("no key is 401 and a key without manage is 403", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        expect((yield* request("GET", "/api/v1/manage/channels")).status).toBe(401)
        const readKey = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, { api_key: { name: "r", scopes: ["read", "write"] } })
        const denied = yield* manage(readKey.body.data.key, "POST", "/channels", { channel: { name: "x", type: "echo" } })
        expect(denied.status).toBe(403)
        expect(denied.body.error.code).toBe("insufficient_scope")
      }))
  })

  describe("validation", () => {
    sqlIt("a missing name and unknown type, mode and status are 422 per field", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        expect(yield* invalidCreate(tenant, { config: { url: HOOK_URL } })).toEqual({ name: ["is required"] })
        expect(yield* invalidCreate(tenant, { name: "   ", config: { url: HOOK_URL } })).toEqual({ name: ["is required"] })
        expect(yield* invalidCreate(tenant, { name: "x".repeat(201), config: { url: HOOK_URL } })).toHaveProperty("name")
        // Names count characters, as the database does: 200 emoji are a name, 201 are not.
        expect(yield* invalidCreate(tenant, { name: "😀".repeat(201), config: { url: HOOK_URL } })).toHaveProperty("name")
        const emoji = yield* manage(tenant.api_key, "POST", "/channels", { channel: { ...webhook({}), name: "😀".repeat(200) } })
        expect(emoji.status).toBe(201)
        // An unknown type is reported alone: there is no type to check the config against.
        expect(yield* invalidCreate(tenant, { name: "x", type: "sms", mode: "both", status: "paused", config: {} })).toEqual({
          type: [expect.stringContaining("webhook")],
          mode: ["must be inbound, outbound or duplex"],
          status: ["must be active or inactive"]
        })
      }))

    sqlIt("wrong JSON types, bad JSON and a missing wrapper are 400 bad_request", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        for (
          const channel of [
            { name: 42 },
            { name: "x", config: [] },
            { name: "x", config: "http://example.com" },
            { name: "x", config: null },
            { name: "x", require_signature: "yes" },
            { name: "x", transformations: {} },
            { name: "x", transformations: [{}] },
            { name: "x", transformations: [{ type: 5 }] },
            { name: "x", retry_policy: { max_attempts: "3" } },
            { name: "x", retry_policy: [] },
            { name: "x", rate_limit: { limit: "5", scale_ms: 1000 } },
            { name: "x", rate_limit: 5 },
            null,
            "channel"
          ]
        ) {
          const reply = yield* refusedCreate(tenant, channel, 400)
          expect(reply.body).toEqual(envelope("bad_request"))
        }
        const unwrapped = yield* manage(tenant.api_key, "POST", "/channels", { name: "x", type: "echo" })
        expect(unwrapped.status).toBe(400)
        const broken = yield* request("POST", "/api/v1/manage/channels", { raw: "{\"channel\":", headers: { "x-api-key": tenant.api_key } })
        expect(broken.status).toBe(400)
        expect(broken.body).toEqual(envelope("bad_request"))
        const channel = yield* createChannel(tenant.api_key)
        const patch = yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}`, { channel: { status: true } })
        expect(patch.status).toBe(400)
        expect((yield* storedCounts(tenant.id)).channels).toBe(1)
      }))

    sqlIt("retry_policy, rate_limit and transformations are checked; a sent policy is merged into the stored one", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const details = yield* invalidCreate(tenant, {
          ...webhook({}),
          retry_policy: { max_attempts: 0, backoff: "random", base_ms: 1.5, timeout_ms: 60001 },
          rate_limit: { limit: 0 },
          transformations: [{ type: "prefix_text", value: "x" }, { type: " " }]
        })
        expect(details).toEqual({
          retry_policy: ["is invalid"],
          "retry_policy.max_attempts": ["must be an integer from 1 to 100"],
          "retry_policy.base_ms": ["must be an integer from 1 to 3600000"],
          "retry_policy.timeout_ms": ["must be an integer from 1 to 60000"],
          "retry_policy.backoff": ["must be exponential, linear or fixed"],
          rate_limit: ["is invalid"],
          "rate_limit.limit": ["must be an integer from 1 to 1000000"],
          "rate_limit.scale_ms": ["is required"],
          transformations: ["is invalid"],
          "transformations[1].type": ["must not be empty"]
        })
        expect(yield* invalidCreate(tenant, { ...webhook({}), retry_policy: { max_attempts: 101 } })).toHaveProperty(
          "retry_policy.max_attempts"
        )
        expect(yield* invalidCreate(tenant, { ...webhook({}), retry_policy: { base_ms: 5000, max_ms: 4000 } })).toEqual({
          retry_policy: ["is invalid"],
          "retry_policy.base_ms": ["must not exceed max_ms"]
        })
        const tooMany = Array.from({ length: 51 }, () => ({ type: "prefix_text", value: "x" }))
        expect(yield* invalidCreate(tenant, { ...webhook({}), transformations: tooMany })).toEqual({
          transformations: ["must have at most 50 items"]
        })

        const channel = yield* createChannel(tenant.api_key, {
          retry_policy: { max_attempts: 3 },
          rate_limit: { limit: 10, scale_ms: 1000 },
          transformations: [{ type: "set_metadata", key: "k", value: { nested: true } }]
        })
        expect(channel.retry_policy).toEqual({ ...DEFAULT_POLICY, max_attempts: 3 })
        expect(channel.rate_limit).toEqual({ limit: 10, scale_ms: 1000 })
        expect(channel.transformations).toEqual([{ type: "set_metadata", key: "k", value: { nested: true } }])
        const patched = yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}`, {
          channel: { retry_policy: { backoff: "linear", timeout_ms: 60000 }, rate_limit: null }
        })
        expect(patched.status).toBe(200)
        expect(patched.body.data.retry_policy).toEqual({ ...DEFAULT_POLICY, max_attempts: 3, backoff: "linear", timeout_ms: 60000 })
        expect(patched.body.data.rate_limit).toBeNull()
        expect(patched.body.data.transformations).toEqual(channel.transformations)
      }))

    sqlIt("a transformation of a type outside the middleware vocabulary is 422 on create and update, nothing stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        // CONTRACT.md §8: set_metadata, remove_metadata, prefix_text, truncate_text, redact_text.
        expect(yield* invalidCreate(tenant, { ...webhook({}), transformations: [{ type: "prefix_text", value: "x" }, { type: "uppercase" }] }))
          .toEqual({
            transformations: ["is invalid"],
            "transformations[1].type": [
              "must be one of set_metadata, remove_metadata, prefix_text, truncate_text, redact_text"
            ]
          })
        const channel = yield* createChannel(tenant.api_key, {
          transformations: [
            { type: "set_metadata", key: "k", value: 1 },
            { type: "remove_metadata", key: "k" },
            { type: "prefix_text", value: "> " },
            { type: "truncate_text", max_bytes: 100 },
            { type: "redact_text", pattern: "\\d+", replacement: "#" }
          ]
        })
        const patched = yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}`, {
          channel: { transformations: [{ type: "nonsense" }] }
        })
        expect(patched.status).toBe(422)
        expect(patched.body.error.details).toHaveProperty(["transformations[0].type"])
        expect((yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)).body.data.transformations)
          .toEqual(channel.transformations)
      }))

    sqlIt("transformation parameters are checked per type: each missing or mistyped one is 422 at its path, nothing stored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const REQUIRED = "is required"
        const STRING = "must be a string"
        const NOT_EMPTY = "must not be empty"
        const MAX_BYTES = "must be an integer from 1 to 65536"
        const PATTERN_BYTES = "must be at most 256 bytes of UTF-8"
        const cases: Array<[Record<string, unknown>, Record<string, unknown>]> = [
          [{ type: "set_metadata", value: 1 }, { key: REQUIRED }],
          [{ type: "set_metadata", key: "", value: 1 }, { key: NOT_EMPTY }],
          [{ type: "set_metadata", key: 5, value: 1 }, { key: STRING }],
          [{ type: "set_metadata", key: "k" }, { value: REQUIRED }],
          [{ type: "set_metadata" }, { key: REQUIRED, value: REQUIRED }],
          [{ type: "remove_metadata" }, { key: REQUIRED }],
          [{ type: "remove_metadata", key: "" }, { key: NOT_EMPTY }],
          [{ type: "remove_metadata", key: ["k"] }, { key: STRING }],
          [{ type: "prefix_text" }, { value: REQUIRED }],
          [{ type: "prefix_text", value: 1 }, { value: STRING }],
          [{ type: "prefix_text", value: null }, { value: STRING }],
          [{ type: "truncate_text" }, { max_bytes: REQUIRED }],
          [{ type: "truncate_text", max_bytes: 0 }, { max_bytes: MAX_BYTES }],
          [{ type: "truncate_text", max_bytes: 65537 }, { max_bytes: MAX_BYTES }],
          [{ type: "truncate_text", max_bytes: 1.5 }, { max_bytes: MAX_BYTES }],
          [{ type: "truncate_text", max_bytes: "100" }, { max_bytes: MAX_BYTES }],
          [{ type: "truncate_text", max_bytes: null }, { max_bytes: MAX_BYTES }],
          [{ type: "redact_text" }, { pattern: REQUIRED, replacement: REQUIRED }],
          [{ type: "redact_text", replacement: "#" }, { pattern: REQUIRED }],
          [{ type: "redact_text", pattern: "", replacement: "#" }, { pattern: NOT_EMPTY }],
          [{ type: "redact_text", pattern: 5, replacement: "#" }, { pattern: STRING }],
          [{ type: "redact_text", pattern: "a".repeat(257), replacement: "#" }, { pattern: PATTERN_BYTES }],
          // 129 characters, 258 bytes: the limit counts bytes.
          [{ type: "redact_text", pattern: "é".repeat(129), replacement: "#" }, { pattern: PATTERN_BYTES }],
          [{ type: "redact_text", pattern: "(", replacement: "#" }, {
            pattern: expect.stringMatching(/^must be a valid regular expression \(.+\)$/)
          }],
          [{ type: "redact_text", pattern: "a{2,1}", replacement: "#" }, {
            pattern: expect.stringMatching(/^must be a valid regular expression/)
          }],
          [{ type: "redact_text", pattern: "\\d" }, { replacement: REQUIRED }],
          [{ type: "redact_text", pattern: "\\d", replacement: 0 }, { replacement: STRING }]
        ]
        for (const [step, problems] of cases) {
          const details = yield* invalidCreate(tenant, {
            ...webhook({}),
            transformations: [{ type: "prefix_text", value: "x" }, step]
          })
          const expected: Record<string, unknown> = { transformations: ["is invalid"] }
          for (const [parameter, message] of Object.entries(problems)) {
            expected[`transformations[1].${parameter}`] = [message]
          }
          expect(details, JSON.stringify(step)).toEqual(expected)
        }

        // The bounds themselves, null as a metadata value and an empty prefix are accepted.
        const accepted = [
          { type: "set_metadata", key: "k", value: null },
          { type: "prefix_text", value: "" },
          { type: "truncate_text", max_bytes: 1 },
          { type: "truncate_text", max_bytes: 65536 },
          { type: "redact_text", pattern: "é".repeat(128), replacement: "" }
        ]
        const channel = yield* createChannel(tenant.api_key, { transformations: accepted })
        expect(channel.transformations).toEqual(accepted)

        // An update is checked the same way and changes nothing when refused.
        const { secret: _secret, ...before } = channel
        for (const step of [{ type: "truncate_text" }, { type: "redact_text", pattern: "[", replacement: "#" }]) {
          const patched = yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}`, {
            channel: { transformations: [step] }
          })
          expect(patched.status).toBe(422)
          expect(patched.body.error.code).toBe("validation_failed")
          expect(Object.keys(patched.body.error.details).sort()).toEqual(
            ["transformations", step.type === "truncate_text" ? "transformations[0].max_bytes" : "transformations[0].pattern"]
          )
          expect((yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)).body.data).toEqual(before)
        }
      }))

    sqlIt("unknown keys of a transformation step are dropped: the stored step is its type and known parameters", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key, {
          transformations: [
            { type: "set_metadata", key: "k", value: 1, extra: true },
            { type: "truncate_text", max_bytes: 10, unit: "characters", value: "x" }
          ]
        })
        const expected = [{ type: "set_metadata", key: "k", value: 1 }, { type: "truncate_text", max_bytes: 10 }]
        expect(channel.transformations).toEqual(expected)
        const stored = (id: string) =>
          query<{ transformations: unknown }>("SELECT transformations FROM channels WHERE id = $1", [id]).pipe(
            Effect.map((rows) => rows[0]!.transformations)
          )
        expect(yield* stored(channel.id)).toEqual(expected)

        const patched = yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}`, {
          channel: { transformations: [{ type: "redact_text", pattern: "\\d+", replacement: "#", flags: "gi" }] }
        })
        expect(patched.status).toBe(200)
        const redact = [{ type: "redact_text", pattern: "\\d+", replacement: "#" }]
        expect(patched.body.data.transformations).toEqual(redact)
        expect(yield* stored(channel.id)).toEqual(redact)
      }))

    sqlIt("webhook config: url, method, headers, timeouts and sizes are checked at save", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const cases: Array<[Record<string, unknown>, string]> = [
          [{ url: undefined }, "config.url"],
          [{ url: "" }, "config.url"],
          [{ url: 42 }, "config.url"],
          [{ url: "ftp://example.com/x" }, "config.url"],
          [{ url: "not a url" }, "config.url"],
          [{ url: "https://user:pw@example.com/x" }, "config.url"],
          [{ method: "GET" }, "config.method"],
          [{ method: 1 }, "config.method"],
          [{ headers: "x" }, "config.headers"],
          [{ headers: ["x"] }, "config.headers"],
          [{ headers: { "X-Num": 5 } }, "config.headers.X-Num"],
          [{ headers: { "bad header": "x" } }, "config.headers.bad header"],
          [{ headers: { "X-Split": "a\r\nInjected: 1" } }, "config.headers.X-Split"],
          [{ headers: { "X-A": "1", "x-a": "2" } }, "config.headers.x-a"],
          [{ connect_timeout: 30001 }, "config.connect_timeout"],
          [{ connect_timeout: 0 }, "config.connect_timeout"],
          [{ connect_timeout: 1.5 }, "config.connect_timeout"],
          [{ connect_timeout: "100" }, "config.connect_timeout"],
          [{ receive_timeout: 60001 }, "config.receive_timeout"],
          [{ max_response_bytes: 10485761 }, "config.max_response_bytes"]
        ]
        const reserved = [
          "Host",
          "Content-Length",
          "content-type",
          "Connection",
          "Expect",
          "Keep-Alive",
          "Proxy-Authenticate",
          "Proxy-Authorization",
          "Proxy-Connection",
          "TE",
          "Trailer",
          "Trailers",
          "Transfer-Encoding",
          "Upgrade",
          "X-Chat-Signature",
          "x-chat-anything"
        ]
        for (const name of reserved) cases.push([{ headers: { [name]: "x" } }, `config.headers.${name}`])
        for (const [config, field] of cases) {
          const details = yield* invalidCreate(tenant, webhook(config))
          expect(details, JSON.stringify(config)).toEqual({ config: [expect.any(String)], [field]: [expect.any(String)] })
        }
        const edge = yield* createChannel(tenant.api_key, {
          config: { url: HOOK_URL, connect_timeout: 30000, receive_timeout: 60000, max_response_bytes: 10485760 }
        })
        expect(edge.config).toMatchObject({ connect_timeout: 30000, receive_timeout: 60000, max_response_bytes: 10485760 })
      }))

    sqlIt("the address guard refuses non-public webhook targets at save; unresolvable hosts are accepted", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        for (
          const url of [
            "http://10.0.0.1/x",
            "http://169.254.169.254/",
            "http://[::1]/",
            "http://[fd00::1]/",
            "http://[::ffff:10.0.0.1]/",
            "http://192.168.1.10:8080/hook",
            "http://100.64.0.1/",
            "http://localhost:4000/hook",
            "http://0.0.0.0/"
          ]
        ) {
          const details = yield* invalidCreate(tenant, webhook({ url }))
          expect(details, url).toEqual({ config: [expect.any(String)], "config.url": [expect.stringContaining("non-public")] })
        }
        const local = yield* createChannel(tenant.api_key, { config: { url: "http://127.0.0.1:9/hook" } })
        expect(local.config.url).toBe("http://127.0.0.1:9/hook")
        const unresolved = yield* createChannel(tenant.api_key, { config: { url: "https://no-such-host.invalid/hook" } })
        expect(unresolved.config.url).toBe("https://no-such-host.invalid/hook")

        const before = yield* manage(tenant.api_key, "GET", `/channels/${local.id}`)
        const moved = yield* manage(tenant.api_key, "PATCH", `/channels/${local.id}`, {
          channel: { name: "renamed", config: { url: "http://169.254.169.254/latest/meta-data" } }
        })
        expect(moved.status).toBe(422)
        expect(moved.body.error.details).toHaveProperty(["config.url"])
        const after = yield* manage(tenant.api_key, "GET", `/channels/${local.id}`)
        expect(after.body.data).toEqual(before.body.data)
        expect(after.headers.get("etag")).toBe(before.headers.get("etag"))
      }))

    sqlIt("meta_messaging: strings only, an http(s) api_base_url, and app_secret when signatures are required", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const meta = (config: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
          name: "meta",
          type: "meta_messaging",
          config,
          ...extra
        })
        expect(yield* invalidCreate(tenant, meta({ access_token: "at" }))).toEqual({
          config: [expect.any(String)],
          "config.app_secret": ["is required when require_signature is true"]
        })
        expect(yield* invalidCreate(tenant, meta({ app_secret: "" }))).toHaveProperty(["config.app_secret"])
        expect(yield* invalidCreate(tenant, meta({ app_secret: "s", access_token: 5, phone_number_id: 1 }))).toEqual({
          config: [expect.any(String)],
          "config.access_token": ["must be a string"],
          "config.phone_number_id": ["must be a string"]
        })
        expect(yield* invalidCreate(tenant, meta({ app_secret: "s", api_base_url: "ftp://graph.example.com" }))).toHaveProperty(
          ["config.api_base_url"]
        )
        // The provider's API is called there: a non-public address is refused like a webhook target.
        for (const api_base_url of ["http://10.0.0.7/", "https://169.254.169.254/latest", "http://[::ffff:192.168.1.1]/"]) {
          expect(yield* invalidCreate(tenant, meta({ app_secret: "s", api_base_url }))).toEqual({
            config: [expect.any(String)],
            "config.api_base_url": [expect.stringContaining("non-public")]
          })
        }
        const unsigned = yield* createChannel(tenant.api_key, meta({ verify_token: "vt" }, { require_signature: false }))
        expect(unsigned.require_signature).toBe(false)
        const refused = yield* manage(tenant.api_key, "PATCH", `/channels/${unsigned.id}`, { channel: { require_signature: true } })
        expect(refused.status).toBe(422)
        expect(refused.body.error.details).toHaveProperty(["config.app_secret"])
        const signed = yield* manage(tenant.api_key, "PATCH", `/channels/${unsigned.id}`, {
          channel: { require_signature: true, config: { verify_token: "[REDACTED]", app_secret: "s3", api_base_url: "http://127.0.0.1:9" } }
        })
        expect(signed.status).toBe(200)
        expect(signed.body.data.config).toEqual({ verify_token: "[REDACTED]", app_secret: "[REDACTED]", api_base_url: "http://127.0.0.1:9" })
        expect(yield* storedConfig(unsigned.id)).toEqual({ verify_token: "vt", app_secret: "s3", api_base_url: "http://127.0.0.1:9" })
      }))

    sqlIt("nats: a nats:// or tls:// url and a subject without wildcards are required", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const nats = (config: Record<string, unknown>) => ({ name: "bus", type: "nats", config })
        expect(yield* invalidCreate(tenant, nats({}))).toEqual({
          config: [expect.any(String)],
          "config.url": ["is required"],
          "config.subject": ["is required"]
        })
        for (const url of ["http://127.0.0.1:4222", "nats//x", 5]) {
          expect(yield* invalidCreate(tenant, nats({ url, subject: "a" }))).toHaveProperty(["config.url"])
        }
        for (const subject of ["a.*", "a.>", "a..b", "with space", "", 7]) {
          expect(yield* invalidCreate(tenant, nats({ url: "nats://127.0.0.1:4222", subject }))).toHaveProperty(["config.subject"])
        }
      }))

    sqlIt("changing the type checks the config against the new type", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const echo = yield* createChannel(tenant.api_key, { type: "echo", config: { note: "x" } })
        const refused = yield* manage(tenant.api_key, "PATCH", `/channels/${echo.id}`, { channel: { type: "webhook" } })
        expect(refused.status).toBe(422)
        expect(refused.body.error.details).toEqual({ config: [expect.any(String)], "config.url": ["is required"] })
        expect((yield* manage(tenant.api_key, "GET", `/channels/${echo.id}`)).body.data.type).toBe("echo")
        const moved = yield* manage(tenant.api_key, "PATCH", `/channels/${echo.id}`, {
          channel: { type: "webhook", config: { url: HOOK_URL } }
        })
        expect(moved.status).toBe(200)
        expect(moved.body.data).toMatchObject({ type: "webhook", config: { url: HOOK_URL, method: "POST" } })
      }))

    sqlIt("a config larger than 64 KiB is refused", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const details = yield* invalidCreate(tenant, { name: "big", type: "echo", config: { blob: "x".repeat(70_000) } })
        expect(details).toEqual({ config: ["must be at most 65536 bytes as JSON"] })
      }))
  })

  describe("redaction", () => {
    const secretConfig = {
      url: HOOK_URL,
      headers: { Authorization: "Bearer h", "X-Api-Key": "hk", "X-Auth-User": "au", "X-Trace": "visible" },
      api_key: "k1",
      apikey: "k2",
      password: "p",
      secret: "s",
      token: "t",
      signing_secret: "ss",
      refresh_token: "rt",
      db_password: "dp",
      private_key: "pk",
      accessToken: "at",
      empty_token: null,
      nested: { deep: { client_secret: "cs", user: "u", headers: { authorization: "Basic x", accept: "json" } } },
      accounts: [{ name: "a", password: "ap" }, { name: "b" }],
      vault: { secret: { nested: "whole object hidden" } },
      label: "keep"
    }
    const redactedConfig = {
      url: HOOK_URL,
      method: "POST",
      connect_timeout: 5000,
      max_response_bytes: 1048576,
      headers: { Authorization: "[REDACTED]", "X-Api-Key": "[REDACTED]", "X-Auth-User": "[REDACTED]", "X-Trace": "visible" },
      api_key: "[REDACTED]",
      apikey: "[REDACTED]",
      password: "[REDACTED]",
      secret: "[REDACTED]",
      token: "[REDACTED]",
      signing_secret: "[REDACTED]",
      refresh_token: "[REDACTED]",
      db_password: "[REDACTED]",
      private_key: "[REDACTED]",
      accessToken: "[REDACTED]",
      empty_token: null,
      nested: { deep: { client_secret: "[REDACTED]", user: "u", headers: { authorization: "[REDACTED]", accept: "json" } } },
      accounts: [{ name: "a", password: "[REDACTED]" }, { name: "b" }],
      vault: { secret: "[REDACTED]" },
      label: "keep"
    }

    it.effect("credential-like config values are [REDACTED] in every response, at any depth and inside arrays", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const created = yield* createChannel(tenant.api_key, { config: secretConfig })
        expect(created.config).toEqual(redactedConfig)
        expect((yield* manage(tenant.api_key, "GET", `/channels/${created.id}`)).body.data.config).toEqual(redactedConfig)
        expect((yield* manage(tenant.api_key, "GET", "/channels")).body.data[0].config).toEqual(redactedConfig)
        const renamed = yield* manage(tenant.api_key, "PATCH", `/channels/${created.id}`, { channel: { name: "renamed" } })
        expect(renamed.body.data.config).toEqual(redactedConfig)
        const rotated = yield* manage(tenant.api_key, "POST", `/channels/${created.id}/rotate_secret`)
        expect(rotated.body.data.config).toEqual(redactedConfig)
      }))

    sqlIt("a config sent back keeps every value still [REDACTED] and replaces the rest; the audit log holds no credential", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const created = yield* createChannel(tenant.api_key, { config: secretConfig })
        const shown = (yield* manage(tenant.api_key, "GET", `/channels/${created.id}`)).body.data.config
        const { token: _dropped, ...kept } = shown
        const sent = {
          ...kept,
          label: "changed",
          headers: { ...shown.headers, "X-Trace": "changed" },
          nested: { deep: { ...shown.nested.deep, user: "v" } },
          accounts: [shown.accounts[0], { name: "b2" }]
        }
        const put = yield* manage(tenant.api_key, "PUT", `/channels/${created.id}`, { channel: { config: sent } })
        expect(put.status).toBe(200)
        const { token: _t, ...expectedShown } = redactedConfig
        expect(put.body.data.config).toEqual({
          ...expectedShown,
          label: "changed",
          headers: { ...redactedConfig.headers, "X-Trace": "changed" },
          nested: { deep: { ...redactedConfig.nested.deep, user: "v" } },
          accounts: [redactedConfig.accounts[0], { name: "b2" }]
        })
        const { token: _s, ...storedWithoutToken } = secretConfig
        expect(yield* storedConfig(created.id)).toEqual({
          ...storedWithoutToken,
          method: "POST",
          connect_timeout: 5000,
          max_response_bytes: 1048576,
          label: "changed",
          headers: { ...secretConfig.headers, "X-Trace": "changed" },
          nested: { deep: { ...secretConfig.nested.deep, user: "v" } },
          accounts: [secretConfig.accounts[0], { name: "b2" }]
        })

        // An explicit value replaces a secret.
        const replaced = yield* manage(tenant.api_key, "PATCH", `/channels/${created.id}`, {
          channel: { config: { ...sent, headers: { ...sent.headers, Authorization: "Bearer new" } } }
        })
        expect(replaced.status).toBe(200)
        const stored = yield* storedConfig(created.id)
        expect(stored.headers.Authorization).toBe("Bearer new")
        expect(stored.nested.deep.client_secret).toBe("cs")

        const audits = yield* query<{ changes: string }>(
          "SELECT coalesce(changes::text, '') AS changes FROM audit_log WHERE resource_id = $1",
          [created.id]
        )
        expect(audits.length).toBe(3)
        for (const { changes } of audits) {
          for (const value of ["Bearer h", "Bearer new", "\"cs\"", "\"ap\"", "whole object hidden"]) {
            expect(changes).not.toContain(value)
          }
        }
      }))

    sqlIt("[REDACTED] where nothing is stored is 422 at its path and changes nothing", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const created = yield* createChannel(tenant.api_key, { config: secretConfig })
        const shown = (yield* manage(tenant.api_key, "GET", `/channels/${created.id}`))
        const before = yield* storedConfig(created.id)
        const config = shown.body.data.config
        const reply = yield* manage(tenant.api_key, "PATCH", `/channels/${created.id}`, {
          channel: {
            name: "renamed",
            config: {
              ...config,
              new_secret: "[REDACTED]",
              accounts: [...config.accounts, { password: "[REDACTED]" }],
              nested: { other: { api_key: "[REDACTED]" } }
            }
          }
        })
        expect(reply.status).toBe(422)
        expect(reply.body.error.details).toEqual({
          config: [expect.any(String)],
          "config.new_secret": ["is [REDACTED] but no stored value exists"],
          "config.accounts[2].password": ["is [REDACTED] but no stored value exists"],
          "config.nested.other.api_key": ["is [REDACTED] but no stored value exists"]
        })
        expect(yield* storedConfig(created.id)).toEqual(before)
        const after = yield* manage(tenant.api_key, "GET", `/channels/${created.id}`)
        expect(after.headers.get("etag")).toBe(shown.headers.get("etag"))
        const onCreate = yield* invalidCreate(tenant, webhook({ password: "[REDACTED]" }))
        expect(onCreate).toEqual({ config: [expect.any(String)], "config.password": ["is [REDACTED] but no stored value exists"] })
      }))

    sqlIt("credentials inside URLs are [REDACTED] in responses and the audit log, and kept when sent back unchanged", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const natsUrl = "nats://bus-user:n4ts-pass@nats.example.com:4222"
        const shownNatsUrl = "nats://bus-user:[REDACTED]@nats.example.com:4222"
        const bus = yield* createChannel(tenant.api_key, { type: "nats", config: { url: natsUrl, subject: "chat.out" } })
        expect(bus.config).toEqual({ url: shownNatsUrl, subject: "chat.out" })
        const hook = yield* createChannel(tenant.api_key, {
          config: {
            url: HOOK_URL,
            fallback_url: "https://hook-user:s3cret-hook@hooks.example.com/x",
            status_urls: ["https://t0ken-hook@hooks.example.com/status?to=a@b.example"]
          }
        })
        const shownHook = {
          url: HOOK_URL,
          fallback_url: "https://hook-user:[REDACTED]@hooks.example.com/x",
          status_urls: ["https://[REDACTED]@hooks.example.com/status?to=a@b.example"]
        }
        expect(hook.config).toMatchObject(shownHook)
        expect((yield* manage(tenant.api_key, "GET", `/channels/${bus.id}`)).body.data.config.url).toBe(shownNatsUrl)
        expect((yield* manage(tenant.api_key, "GET", `/channels/${hook.id}`)).body.data.config).toMatchObject(shownHook)

        // Sent back as shown, with another change beside it: the stored credentials stay.
        const updated = yield* manage(tenant.api_key, "PATCH", `/channels/${bus.id}`, {
          channel: { config: { url: shownNatsUrl, subject: "chat.other" } }
        })
        expect(updated.status).toBe(200)
        expect(updated.body.data.config).toEqual({ url: shownNatsUrl, subject: "chat.other" })
        expect(yield* storedConfig(bus.id)).toEqual({ url: natsUrl, subject: "chat.other" })
        const resent = yield* manage(tenant.api_key, "PUT", `/channels/${hook.id}`, {
          channel: { config: { ...(yield* manage(tenant.api_key, "GET", `/channels/${hook.id}`)).body.data.config, label: "l" } }
        })
        expect(resent.status).toBe(200)
        expect(yield* storedConfig(hook.id)).toMatchObject({
          fallback_url: "https://hook-user:s3cret-hook@hooks.example.com/x",
          status_urls: ["https://t0ken-hook@hooks.example.com/status?to=a@b.example"],
          label: "l"
        })

        // Another host with the marker would send the stored password elsewhere, or store the marker: 422.
        const before = yield* storedConfig(bus.id)
        const moved = yield* manage(tenant.api_key, "PATCH", `/channels/${bus.id}`, {
          channel: { config: { url: "nats://bus-user:[REDACTED]@elsewhere.example.com:4222", subject: "chat.other" } }
        })
        expect(moved.status).toBe(422)
        expect(moved.body.error.details["config.url"]).toEqual([
          "holds a [REDACTED] URL credential but is not the stored URL: send the credential"
        ])
        expect(yield* storedConfig(bus.id)).toEqual(before)
        // A new credential replaces the stored one.
        const replaced = yield* manage(tenant.api_key, "PATCH", `/channels/${bus.id}`, {
          channel: { config: { url: "nats://bus-user:n3w-pass@elsewhere.example.com:4222", subject: "chat.other" } }
        })
        expect(replaced.body.data.config.url).toBe("nats://bus-user:[REDACTED]@elsewhere.example.com:4222")
        expect((yield* storedConfig(bus.id)).url).toBe("nats://bus-user:n3w-pass@elsewhere.example.com:4222")

        const audits = yield* query<{ changes: string }>(
          "SELECT coalesce(changes::text, '') AS changes FROM audit_log WHERE resource_id IN ($1, $2)",
          [bus.id, hook.id]
        )
        expect(audits.length).toBe(5)
        for (const { changes } of audits) {
          for (const credential of ["n4ts-pass", "n3w-pass", "s3cret-hook", "t0ken-hook"]) expect(changes).not.toContain(credential)
        }
        expect(audits.map(({ changes }) => changes).join()).toContain("bus-user:[REDACTED]@nats.example.com")
      }))
  })

  describe("update, If-Match, delete and secret rotation", () => {
    it.effect("PUT and PATCH set the sent fields and keep the others; read-only fields are ignored", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const other = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key, { name: "first", mode: "outbound" })
        const patched = yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}`, {
          channel: { status: "inactive", tenant_id: other.id, id: crypto.randomUUID(), secret: "cs_x", circuit_state: "open" }
        })
        expect(patched.status).toBe(200)
        const { secret: _secret, ...created } = channel
        expect(patched.body.data).toEqual({ ...created, status: "inactive", updated_at: expect.stringMatching(ISO_MICROS) })
        expect(patched.body.data.updated_at).not.toBe(channel["updated_at"])
        const put = yield* manage(tenant.api_key, "PUT", `/channels/${channel.id}`, {
          channel: { name: "second", require_signature: false }
        })
        expect(put.status).toBe(200)
        expect(put.body.data).toMatchObject({ name: "second", require_signature: false, status: "inactive", mode: "outbound" })
        expect(put.headers.get("etag")).not.toBe(patched.headers.get("etag"))
        const again = yield* manage(tenant.api_key, "PUT", `/channels/${channel.id}`, {
          channel: { name: "second", require_signature: false }
        })
        expect(again.body.data).toEqual({ ...put.body.data, updated_at: expect.any(String) })
      }))

    sqlIt("a repeated PATCH or PUT is idempotent: same updated_at and ETag, so a retry with If-Match is 200", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key, {
          name: "before",
          config: { url: HOOK_URL, headers: { Authorization: "Bearer h" } },
          rate_limit: { limit: 10, scale_ms: 1000 },
          transformations: [{ type: "set_metadata", key: "k", value: { nested: true } }]
        })
        const etag = (yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)).headers.get("etag")!
        const first = yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}`, { channel: { name: "same" } }, {
          "if-match": etag
        })
        expect(first.status).toBe(200)
        const tag = first.headers.get("etag")!
        yield* Effect.sleep("20 millis")
        // The client lost the first answer and retries with the tag it had.
        for (const method of ["PATCH", "PUT"]) {
          const retried = yield* manage(tenant.api_key, method, `/channels/${channel.id}`, { channel: { name: "same" } }, {
            "if-match": tag
          })
          expect(retried.status, method).toBe(200)
          expect(retried.body.data, method).toEqual(first.body.data)
          expect(retried.headers.get("etag"), method).toBe(tag)
        }
        // Sending back everything a GET shows ([REDACTED] values included) changes nothing either.
        const shown = yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)
        const resent = yield* manage(tenant.api_key, "PUT", `/channels/${channel.id}`, { channel: shown.body.data }, {
          "if-match": tag
        })
        expect(resent.status).toBe(200)
        expect(resent.body.data).toEqual(first.body.data)
        expect(resent.headers.get("etag")).toBe(tag)
        // If-Match is still checked on a change that changes nothing.
        const stale = yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}`, { channel: { name: "same" } }, {
          "if-match": etag
        })
        expect(stale.status).toBe(412)
        const audits = yield* query("SELECT action FROM audit_log WHERE resource_id = $1 AND action = 'channel.updated'", [
          channel.id
        ])
        expect(audits).toHaveLength(1)
      }))

    it.effect("If-Match: a stale tag is 412 with current_etag and changes nothing; * and the current tag match", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key, { name: "v1" })
        const first = yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)
        const etag = first.headers.get("etag")!
        const changed = yield* manage(tenant.api_key, "PATCH", `/channels/${channel.id}`, { channel: { name: "v2" } }, { "if-match": etag })
        expect(changed.status).toBe(200)
        const current = changed.headers.get("etag")!
        expect(current).not.toBe(etag)
        for (const method of ["PATCH", "PUT"]) {
          const stale = yield* manage(tenant.api_key, method, `/channels/${channel.id}`, { channel: { name: "v3" } }, { "if-match": etag })
          expect(stale.status).toBe(412)
          expect(stale.body.error).toEqual({
            code: "precondition_failed",
            message: expect.any(String),
            details: { current_etag: current },
            request_id: expect.any(String)
          })
        }
        const staleDelete = yield* manage(tenant.api_key, "DELETE", `/channels/${channel.id}`, undefined, { "if-match": etag })
        expect(staleDelete.status).toBe(412)
        expect(staleDelete.body.error.details).toEqual({ current_etag: current })
        const unchanged = yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)
        expect(unchanged.body.data.name).toBe("v2")
        expect(unchanged.headers.get("etag")).toBe(current)
        const listed = yield* manage(tenant.api_key, "PUT", `/channels/${channel.id}`, { channel: { name: "v3" } }, {
          "if-match": `"other", ${current}`
        })
        expect(listed.status).toBe(200)
        const star = yield* manage(tenant.api_key, "PUT", `/channels/${channel.id}`, { channel: { name: "v4" } }, { "if-match": "*" })
        expect(star.status).toBe(200)
        expect(star.body.data.name).toBe("v4")
        const removed = yield* manage(tenant.api_key, "DELETE", `/channels/${channel.id}`, undefined, {
          "if-match": star.headers.get("etag")!
        })
        expect(removed.status).toBe(204)
      }))

    // The update validates before it locks the row (validation may resolve a host): a change committed
    // in between is met under the lock, and the update's If-Match is checked against it.
    sqlIt("a change committed between an update's read and its row lock is 412 to the update, not overwritten", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key, { name: "v1" })
        for (const method of ["PATCH", "PUT"]) {
          const etag = (yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)).headers.get("etag")!
          const raced = yield* commitWhenWaiting(
            [["UPDATE channels SET name = $2, updated_at = now() WHERE id = $1", [channel.id, `theirs-${method}`]]],
            manage(tenant.api_key, method, `/channels/${channel.id}`, { channel: { name: `mine-${method}` } }, { "if-match": etag })
          )
          const current = yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)
          expect(statusAndCode(raced), method).toEqual({ status: 412, code: "precondition_failed" })
          expect(raced.body.error.details).toEqual({ current_etag: current.headers.get("etag") })
          expect(current.body.data.name).toBe(`theirs-${method}`)
        }
      }))

    sqlIt("DELETE is 204 and removes the channel with its conversations; If-Match * matches", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* createChannel(tenant.api_key)
        const survivor = yield* createChannel(tenant.api_key)
        const conversationId = crypto.randomUUID()
        const otherConversation = crypto.randomUUID()
        yield* query(
          `INSERT INTO conversations (id, tenant_id, channel_id, origin_channel_id) VALUES ($1, $2, $3, $3), ($4, $2, $5, $5)`,
          [conversationId, tenant.id, channel.id, otherConversation, survivor.id]
        )
        const removed = yield* manage(tenant.api_key, "DELETE", `/channels/${channel.id}`, undefined, { "if-match": "*" })
        expect(removed.status).toBe(204)
        expect(removed.body).toBeNull()
        expect((yield* manage(tenant.api_key, "GET", `/channels/${channel.id}`)).status).toBe(404)
        expect((yield* manage(tenant.api_key, "DELETE", `/channels/${channel.id}`)).status).toBe(404)
        const conversations = yield* query<{ id: string }>("SELECT id FROM conversations WHERE tenant_id = $1", [tenant.id])
        expect(conversations).toEqual([{ id: otherConversation }])
        const audits = yield* query<{ action: string; actor_id: string }>(
          "SELECT action, actor_id FROM audit_log WHERE resource_id = $1 ORDER BY inserted_at",
          [channel.id]
        )
        expect(audits).toEqual([{ action: "channel.created", actor_id: tenant.id }, { action: "channel.deleted", actor_id: tenant.id }])
      }))

    sqlIt("rotate_secret returns a new secret once; only its hash is stored and the old one is gone", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const scoped = yield* admin("POST", `/tenants/${tenant.id}/api_keys`, { api_key: { name: "ops", scopes: ["manage"] } })
        const key = scoped.body.data.key as string
        const channel = yield* createChannel(key)
        const rotated = yield* manage(key, "POST", `/channels/${channel.id}/rotate_secret`)
        expect(rotated.status).toBe(200)
        const { secret, ...shown } = rotated.body.data
        expect(secret).toMatch(/^cs_[0-9A-Za-z]{40}$/)
        expect(secret).not.toBe(channel.secret)
        expect(shown.updated_at).not.toBe(channel["updated_at"])
        const got = yield* manage(key, "GET", `/channels/${channel.id}`)
        expect(got.body.data).toEqual(shown)
        expect(got.body.data.secret).toBeUndefined()
        expect(rotated.headers.get("etag")).toBe(got.headers.get("etag"))
        const rows = yield* query<{ hash: string }>("SELECT encode(secret_hash, 'hex') AS hash FROM channels WHERE id = $1", [
          channel.id
        ])
        expect(rows).toEqual([{ hash: sha256Hex(secret) }])
        const old = yield* query("SELECT id FROM channels WHERE secret_hash = decode($1, 'hex')", [sha256Hex(channel.secret)])
        expect(old).toEqual([])
        const audits = yield* query<{ action: string; actor_id: string }>(
          "SELECT action, actor_id FROM audit_log WHERE resource_id = $1 AND action = 'channel.secret_rotated'",
          [channel.id]
        )
        expect(audits).toEqual([{ action: "channel.secret_rotated", actor_id: scoped.body.data.id }])
      }))
  })
})
