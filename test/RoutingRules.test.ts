import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer, Scope } from "effect"
import { RoutingRules } from "../src/routing/RoutingRules.js"
import type { TenantId } from "../src/domain/Tenant.js"
import { eventually } from "./support/Eventually.js"
import { createChannel, manage } from "./support/ManageClient.js"
import { query, serverUrl } from "./support/TestDatabase.js"
import { createTenant, freePorts, inProcessNode, request, TestNodeLive } from "./support/TestNode.js"

type Tenant = { id: TenantId; api_key: string }

const rules = (key: string, method: string, path = "", body?: unknown, auth: Record<string, string> = { "x-api-key": key }) =>
  request(method, `/api/v1/routing_rules${path}`, { ...(body === undefined ? {} : { body }), headers: auth })

/** A tenant with an inbound-capable source, two outbound targets and an inbound-only channel. */
const setup = Effect.gen(function*() {
  const tenant = (yield* createTenant()) as Tenant
  const source = yield* createChannel(tenant.api_key, { mode: "duplex" })
  const a = yield* createChannel(tenant.api_key, { mode: "outbound" })
  const b = yield* createChannel(tenant.api_key, { mode: "duplex" })
  const inbound = yield* createChannel(tenant.api_key, { mode: "inbound" })
  return { tenant, source, a, b, inbound }
})

const createRule = (key: string, fields: Record<string, unknown>) =>
  Effect.map(rules(key, "POST", "", { routing_rule: { name: `rule-${crypto.randomUUID().slice(0, 8)}`, ...fields } }), (reply) => {
    expect(reply.status, JSON.stringify(reply.body)).toBe(201)
    return reply.body.data as Record<string, any>
  })

/** A create refused with 422 `validation_failed`: its details; nothing stored. */
const invalid = (tenant: Tenant, rule: unknown) =>
  Effect.gen(function*() {
    const before = yield* query<{ n: number }>("SELECT count(*)::int AS n FROM routing_rules WHERE tenant_id = $1", [tenant.id])
    const reply = yield* rules(tenant.api_key, "POST", "", { routing_rule: rule })
    expect(reply.status, JSON.stringify(reply.body)).toBe(422)
    expect(reply.body.error.code).toBe("validation_failed")
    const after = yield* query<{ n: number }>("SELECT count(*)::int AS n FROM routing_rules WHERE tenant_id = $1", [tenant.id])
    expect(after).toEqual(before)
    return reply.body.error.details as Record<string, Array<string>>
  })

const scopedKey = (tenant: Tenant, scopes: Array<string>) =>
  Effect.map(manage(tenant.api_key, "POST", "/api_keys", { api_key: { name: "k", scopes } }), (reply) => {
    expect(reply.status).toBe(201)
    return reply.body.data.key as string
  })

const SECONDS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/

layer(TestNodeLive(), { excludeTestServices: true, timeout: "120 seconds" })("tenant API: routing rules", (it) => {
  const sqlIt = it.effect.runIf(serverUrl !== undefined)

  describe("CRUD", () => {
    sqlIt("create with defaults, get, list by name, patch, put, delete; every change audited", () =>
      Effect.gen(function*() {
        const { a, b, source, tenant } = yield* setup
        const created = yield* createRule(tenant.api_key, { name: "zeta", source_channel_id: source.id.toUpperCase(), target_channel_ids: [a.id] })
        expect(created).toEqual({
          id: expect.any(String),
          tenant_id: tenant.id,
          name: "zeta",
          source_channel_id: source.id,
          target_channel_ids: [a.id],
          enabled: true,
          conditions: {},
          transformations: [],
          priority: 100,
          stop_processing: false,
          inserted_at: expect.stringMatching(SECONDS),
          updated_at: expect.stringMatching(SECONDS)
        })
        yield* createRule(tenant.api_key, { name: "alpha", source_channel_id: source.id, target_channel_ids: [b.id] })
        const listed = yield* rules(tenant.api_key, "GET")
        expect(listed.status).toBe(200)
        expect(listed.body.data.map((r: any) => r.name)).toEqual(["alpha", "zeta"])
        const got = yield* rules(tenant.api_key, "GET", `/${created.id}`)
        expect(got.body.data).toEqual(created)
        const patched = yield* rules(tenant.api_key, "PATCH", `/${created.id}`, { routing_rule: { priority: -3, target_channel_ids: [a.id, b.id] } })
        expect(patched.status, JSON.stringify(patched.body)).toBe(200)
        expect(patched.body.data).toMatchObject({ name: "zeta", priority: -3, target_channel_ids: [a.id, b.id] })
        const put = yield* rules(tenant.api_key, "PUT", `/${created.id}`, { routing_rule: { enabled: false } })
        expect(put.body.data).toMatchObject({ enabled: false, priority: -3 })
        const deleted = yield* rules(tenant.api_key, "DELETE", `/${created.id}`)
        expect(deleted.status).toBe(204)
        expect((yield* rules(tenant.api_key, "GET", `/${created.id}`)).status).toBe(404)
        const audits = yield* query<{ action: string; actor_type: string; actor_id: string }>(
          "SELECT action, actor_type, actor_id FROM audit_log WHERE resource_id = $1 ORDER BY inserted_at, action",
          [created.id]
        )
        expect(audits.map((row) => row.action).sort()).toEqual(["routing_rule.created", "routing_rule.deleted", "routing_rule.updated", "routing_rule.updated"])
        expect(audits.every((row) => row.actor_type === "tenant_api" && row.actor_id === tenant.id)).toBe(true)
      }))

    sqlIt("a repeated change writes nothing; a missing wrapper is 400; a malformed id 400; foreign and unknown rules 404", () =>
      Effect.gen(function*() {
        const { a, source, tenant } = yield* setup
        const other = (yield* setup).tenant
        const rule = yield* createRule(tenant.api_key, { source_channel_id: source.id, target_channel_ids: [a.id] })
        yield* rules(tenant.api_key, "PATCH", `/${rule.id}`, { routing_rule: { priority: 100 } })
        const audits = yield* query("SELECT 1 FROM audit_log WHERE resource_id = $1", [rule.id])
        expect(audits.length).toBe(1)
        const unwrapped = yield* rules(tenant.api_key, "POST", "", { name: "x", source_channel_id: source.id, target_channel_ids: [a.id] })
        expect(unwrapped.status).toBe(400)
        expect((yield* rules(tenant.api_key, "PATCH", `/${rule.id}`, { priority: 1 })).status).toBe(400)
        expect((yield* rules(tenant.api_key, "GET", "/not-a-uuid")).status).toBe(400)
        for (const [method, body] of [["GET", undefined], ["PATCH", { routing_rule: { priority: 1 } }], ["PUT", { routing_rule: {} }], ["DELETE", undefined]] as const) {
          const foreign = yield* rules(other.api_key, method, `/${rule.id}`, body)
          expect(foreign.status, method).toBe(404)
          expect(foreign.body.error.code).toBe("not_found")
          expect((yield* rules(tenant.api_key, method, `/${crypto.randomUUID()}`, body)).status).toBe(404)
        }
        expect((yield* rules(other.api_key, "GET")).body.data).toEqual([])
      }))

    sqlIt("scopes: read reads and dry-runs, manage writes", () =>
      Effect.gen(function*() {
        const { a, source, tenant } = yield* setup
        const reader = yield* scopedKey(tenant, ["read"])
        const writer = yield* scopedKey(tenant, ["manage"])
        const body = { routing_rule: { name: "r", source_channel_id: source.id, target_channel_ids: [a.id] } }
        const refused = yield* rules(reader, "POST", "", body)
        expect(refused.status).toBe(403)
        expect(refused.body.error.code).toBe("insufficient_scope")
        const created = yield* rules(writer, "POST", "", body)
        expect(created.status).toBe(201)
        expect((yield* rules(writer, "GET")).status).toBe(403)
        expect((yield* rules(reader, "GET")).body.data.length).toBe(1)
        expect((yield* rules(reader, "PATCH", `/${created.body.data.id}`, { routing_rule: { priority: 1 } })).status).toBe(403)
        expect((yield* rules(reader, "DELETE", `/${created.body.data.id}`)).status).toBe(403)
        expect((yield* rules(reader, "POST", "/dry_run", { source_channel_id: source.id, activity: { text: "hi" } })).status).toBe(200)
        expect((yield* rules(writer, "POST", "/dry_run", { source_channel_id: source.id, activity: { text: "hi" } })).status).toBe(403)
        const audit = yield* query<{ actor_id: string }>("SELECT actor_id FROM audit_log WHERE resource_id = $1", [created.body.data.id])
        expect(audit[0]!.actor_id).not.toBe(tenant.id)
      }))

    sqlIt("a channel token reaches only the rules whose source is its channel", () =>
      Effect.gen(function*() {
        const { a, b, source, tenant } = yield* setup
        const mine = yield* createRule(tenant.api_key, { source_channel_id: source.id, target_channel_ids: [a.id] })
        const theirs = yield* createRule(tenant.api_key, { source_channel_id: b.id, target_channel_ids: [a.id] })
        const token = { "x-channel-token": source.secret }
        expect((yield* rules("", "GET", "", undefined, token)).body.data.map((r: any) => r.id)).toEqual([mine.id])
        expect((yield* rules("", "GET", `/${theirs.id}`, undefined, token)).status).toBe(404)
        const other = yield* rules("", "POST", "", { routing_rule: { name: "t", source_channel_id: b.id, target_channel_ids: [a.id] } }, token)
        expect(other.status).toBe(422)
        expect(other.body.error.details.source_channel_id).toBeDefined()
      }))

    sqlIt("the list is capped at lookup_limit", () =>
      Effect.gen(function*() {
        const { a, source, tenant } = yield* setup
        yield* query(
          `INSERT INTO routing_rules (id, tenant_id, name, source_channel_id, target_channel_ids)
           SELECT gen_random_uuid(), $1, 'r' || lpad(i::text, 5, '0'), $2, ARRAY[$3::uuid] FROM generate_series(1, 1001) i`,
          [tenant.id, source.id, a.id]
        )
        const listed = yield* rules(tenant.api_key, "GET")
        expect(listed.body.data.length).toBe(1000)
        expect(listed.body.data[999].name).toBe("r01000")
      }))
  })

  describe("a deleted channel", () => {
    sqlIt("leaves no rule naming it: its source and only-target rules deleted, others narrowed, all audited, in its transaction", () =>
      Effect.gen(function*() {
        const { a, b, source, tenant } = yield* setup
        const c = yield* createChannel(tenant.api_key, { mode: "outbound" })
        const fromB = yield* createRule(tenant.api_key, { source_channel_id: b.id, target_channel_ids: [c.id] })
        const onlyB = yield* createRule(tenant.api_key, { source_channel_id: source.id, target_channel_ids: [b.id] })
        const bAndA = yield* createRule(tenant.api_key, { source_channel_id: source.id, target_channel_ids: [b.id, a.id] })
        const untouched = yield* createRule(tenant.api_key, { source_channel_id: source.id, target_channel_ids: [c.id] })
        // A refused delete changes no rule: the rules are changed in the channel deletion's transaction.
        const stale = { "x-api-key": tenant.api_key, "if-match": "\"stale\"" }
        expect((yield* request("DELETE", `/api/v1/manage/channels/${b.id}`, { headers: stale })).status).toBe(412)
        expect((yield* rules(tenant.api_key, "GET", `/${bAndA.id}`)).body.data).toEqual(bAndA)
        expect(yield* manage(tenant.api_key, "DELETE", `/channels/${b.id}`)).toMatchObject({ status: 204 })
        const listed = (yield* rules(tenant.api_key, "GET")).body.data as Array<Record<string, any>>
        expect(listed.map((rule) => [rule.id, rule.target_channel_ids]).sort()).toEqual(
          [[bAndA.id, [a.id]], [untouched.id, [c.id]]].sort()
        )
        expect(listed.find((rule) => rule.id === untouched.id)).toEqual(untouched)
        const audits = yield* query<{ resource_id: string; action: string; actor_id: string; changes: unknown }>(
          `SELECT resource_id, action, actor_id, changes FROM audit_log
           WHERE tenant_id = $1 AND resource_type = 'routing_rule' AND action <> 'routing_rule.created' ORDER BY action, resource_id`,
          [tenant.id]
        )
        expect(audits).toEqual([
          ...[fromB, onlyB].sort((x, y) => x.id.localeCompare(y.id)).map((rule) => ({
            resource_id: rule.id,
            action: "routing_rule.deleted",
            actor_id: tenant.id,
            changes: { name: rule.name }
          })),
          { resource_id: bAndA.id, action: "routing_rule.updated", actor_id: tenant.id, changes: { target_channel_ids: [a.id] } }
        ])
        // The narrowed rule still routes, to its remaining target.
        const planned = yield* rules(tenant.api_key, "POST", "/dry_run", { source_channel_id: source.id, activity: { text: "hi" } })
        expect(planned.body.data.rules.find((rule: Record<string, any>) => rule.id === bAndA.id).targets).toEqual([
          { channel_id: a.id, result: expect.any(String) }
        ])
      }))
  })

  describe("validation (422 validation_failed, keyed by field)", () => {
    sqlIt("every row of server-apis.md", () =>
      Effect.gen(function*() {
        const { a, b, inbound, source, tenant } = yield* setup
        const outboundOnly = a
        const foreign = (yield* setup).a
        expect(Object.keys(yield* invalid(tenant, {})).sort()).toEqual(["name", "source_channel_id", "target_channel_ids"])
        const ok = { name: "n", source_channel_id: source.id, target_channel_ids: [a.id] }
        yield* createRule(tenant.api_key, { ...ok, name: "taken" })
        expect(Object.keys(yield* invalid(tenant, { ...ok, name: "taken" }))).toEqual(["name"])
        expect(Object.keys(yield* invalid(tenant, { ...ok, target_channel_ids: [] }))).toEqual(["target_channel_ids"])
        const many = yield* Effect.forEach(Array.from({ length: 21 }), () => createChannel(tenant.api_key, { mode: "outbound" }))
        expect(Object.keys(yield* invalid(tenant, { ...ok, target_channel_ids: many.map((c) => c.id) }))).toEqual(["target_channel_ids"])
        yield* createRule(tenant.api_key, { ...ok, name: "twenty", target_channel_ids: many.slice(0, 20).map((c) => c.id) })
        expect(Object.keys(yield* invalid(tenant, { ...ok, target_channel_ids: [source.id] }))).toEqual(["target_channel_ids"])
        expect(Object.keys(yield* invalid(tenant, { ...ok, target_channel_ids: [foreign.id] }))).toEqual(["target_channel_ids"])
        expect(Object.keys(yield* invalid(tenant, { ...ok, source_channel_id: foreign.id }))).toEqual(["source_channel_id"])
        expect(Object.keys(yield* invalid(tenant, { ...ok, source_channel_id: outboundOnly.id, target_channel_ids: [b.id] }))).toEqual(["source_channel_id"])
        expect(Object.keys(yield* invalid(tenant, { ...ok, target_channel_ids: [inbound.id] }))).toEqual(["target_channel_ids"])
        const conditions = yield* invalid(tenant, { ...ok, conditions: { all: [{ field: "activity.text", op: "eq", value: 1 }, { field: "activity.text", op: "like" }] } })
        expect(conditions).toEqual({ conditions: [expect.stringMatching(/^conditions\.all\[1\]\.op: /)] })
        const long = yield* invalid(tenant, { ...ok, conditions: { field: "activity.text", op: "regex", value: "a".repeat(257) } })
        expect(long.conditions![0]).toMatch(/256 bytes/)
        const catastrophic = yield* invalid(tenant, { ...ok, conditions: { field: "activity.text", op: "regex", value: "(a+)+$" } })
        expect(catastrophic.conditions![0]).toMatch(/backtrack catastrophically/)
        const transformations = yield* invalid(tenant, { ...ok, transformations: [{ type: "shout" }] })
        expect(Object.keys(transformations)).toEqual(["transformations"])
        expect(Object.keys(yield* invalid(tenant, { ...ok, transformations: [{ type: "redact_text", pattern: "(x*)*y", replacement: "" }] }))).toEqual(["transformations"])
        for (const priority of [1_000_001, -1_000_001, 1.5]) expect(Object.keys(yield* invalid(tenant, { ...ok, priority }))).toEqual(["priority"])
        yield* createRule(tenant.api_key, { ...ok, name: "edge", priority: -1_000_000 })
      }))

    sqlIt("a wrong JSON type is 422 on its field, on create and on update; only a missing wrapper is 400", () =>
      Effect.gen(function*() {
        const { a, source, tenant } = yield* setup
        const ok = { name: "n", source_channel_id: source.id, target_channel_ids: [a.id] }
        const wrong: ReadonlyArray<[string, unknown, RegExp]> = [
          ["name", 7, /must be a string/],
          ["name", null, /must be a string/],
          ["source_channel_id", 7, /must be a UUID/],
          ["target_channel_ids", a.id, /must be an array of UUIDs/],
          ["target_channel_ids", [7], /must be an array of UUIDs/],
          ["enabled", "yes", /must be a boolean/],
          ["stop_processing", 1, /must be a boolean/],
          ["priority", "5", /must be an integer/],
          ["transformations", { type: "prefix_text" }, /must be an array/],
          ["transformations", ["prefix_text"], /^transformations\[0\]: must be an object/]
        ]
        for (const [field, value, message] of wrong) {
          expect(yield* invalid(tenant, { ...ok, [field]: value }), field).toEqual({ [field]: [expect.stringMatching(message)] })
        }
        const rule = yield* createRule(tenant.api_key, ok)
        for (const [field, value, message] of wrong) {
          const reply = yield* rules(tenant.api_key, "PATCH", `/${rule.id}`, { routing_rule: { [field]: value } })
          expect(reply.status, field).toBe(422)
          expect(reply.body.error.details).toEqual({ [field]: [expect.stringMatching(message)] })
        }
        expect((yield* rules(tenant.api_key, "GET", `/${rule.id}`)).body.data).toEqual(rule)
        expect((yield* rules(tenant.api_key, "POST", "", ok)).status).toBe(400)
        expect((yield* rules(tenant.api_key, "PATCH", `/${rule.id}`, { routing_rule: "x" })).status).toBe(400)
      }))

    sqlIt("enabled rules form no cycle; a disabled one may, until it is enabled", () =>
      Effect.gen(function*() {
        const { b, source, tenant } = yield* setup
        const c = yield* createChannel(tenant.api_key, { mode: "duplex" })
        yield* createRule(tenant.api_key, { source_channel_id: source.id, target_channel_ids: [b.id] })
        yield* createRule(tenant.api_key, { source_channel_id: b.id, target_channel_ids: [c.id] })
        const details = yield* invalid(tenant, { name: "back", source_channel_id: c.id, target_channel_ids: [source.id] })
        expect(details).toEqual({ target_channel_ids: [expect.stringMatching(/cycle/)] })
        const off = yield* createRule(tenant.api_key, { source_channel_id: c.id, target_channel_ids: [source.id], enabled: false })
        const enable = yield* rules(tenant.api_key, "PATCH", `/${off.id}`, { routing_rule: { enabled: true } })
        expect(enable.status).toBe(422)
        expect(Object.keys(enable.body.error.details)).toEqual(["target_channel_ids"])
      }))
  })

  describe("dry_run", () => {
    sqlIt("plans through the same planner: matched rules in order, transformed copies, stop_processing", () =>
      Effect.gen(function*() {
        const { a, b, source, tenant } = yield* setup
        yield* manage(tenant.api_key, "PATCH", `/channels/${a.id}`, { channel: { transformations: [{ type: "prefix_text", value: "A:" }] } })
        const first = yield* createRule(tenant.api_key, {
          name: "first",
          priority: 1,
          source_channel_id: source.id,
          target_channel_ids: [a.id],
          conditions: [{ field: "activity.metadata.lang", op: "eq", value: "fr" }, { field: "time.weekday", op: "eq", value: 7 }],
          transformations: [{ type: "set_metadata", key: "routed", value: true }, { type: "truncate_text", max_bytes: 6 }],
          stop_processing: true
        })
        const second = yield* createRule(tenant.api_key, { name: "second", priority: 2, source_channel_id: source.id, target_channel_ids: [b.id] })
        const run = (body: Record<string, unknown>) => rules(tenant.api_key, "POST", "/dry_run", body)
        const matched = yield* run({ source_channel_id: source.id, at: "2026-11-29T10:00:00Z", activity: { text: "bonjour", metadata: { lang: "fr" } } })
        expect(matched.status, JSON.stringify(matched.body)).toBe(200)
        expect(matched.body.data).toMatchObject({
          direction: "inbound",
          origin_channel_id: source.id,
          source_channel_id: source.id,
          rule_source_channel_id: source.id,
          at: "2026-11-29T10:00:00.000Z",
          activity: { type: "message", sender: "user", text: "bonjour" },
          rules: [
            { id: first.id, name: "first", priority: 1, stop_processing: true, result: "matched", target_channel_ids: [a.id] },
            { id: second.id, result: "skipped" }
          ],
          deliveries: [{ channel_id: a.id, rule_id: first.id, activity: { text: "A:bonj", metadata: { lang: "fr", routed: true } } }]
        })
        // A Monday: the first rule does not match, the second does.
        const monday = yield* run({ source_channel_id: source.id, at: "2026-11-30T10:00:00Z", activity: { text: "x", metadata: { lang: "fr" } } })
        expect(monday.body.data.rules.map((r: any) => r.result)).toEqual(["not_matched", "matched"])
        expect(monday.body.data.deliveries.map((d: any) => d.channel_id)).toEqual([b.id])
        // A reply from another channel goes back to the origin only.
        const reply = yield* run({ source_channel_id: b.id, origin_channel_id: source.id, activity: { text: "x" } })
        expect(reply.body.data).toMatchObject({ direction: "outbound", rule_source_channel_id: null, rules: [] })
        expect(reply.body.data.deliveries.map((d: any) => d.channel_id)).toEqual([source.id])
        // Nothing stored.
        expect(yield* query("SELECT 1 FROM activities WHERE tenant_id = $1", [tenant.id])).toEqual([])
      }))

    sqlIt("conversation, participant and errors", () =>
      Effect.gen(function*() {
        const { a, source, tenant } = yield* setup
        const other = yield* setup
        yield* createRule(tenant.api_key, {
          source_channel_id: source.id,
          target_channel_ids: [a.id],
          conditions: { all: [{ field: "conversation.metadata.plan", op: "eq", value: "gold" }, { field: "participant.display_name", op: "starts_with", value: "An" }] }
        })
        const run = (body: Record<string, unknown>, key = tenant.api_key) => rules(key, "POST", "/dry_run", body)
        const hit = yield* run({ source_channel_id: source.id, conversation: { metadata: { plan: "gold" } }, participant: { display_name: "Ana" }, activity: {} })
        expect(hit.body.data.rules[0].result).toBe("matched")
        const miss = yield* run({ source_channel_id: source.id, activity: {} })
        expect(miss.body.data.rules[0].result).toBe("not_matched")
        const noSource = yield* run({ activity: {} })
        expect(noSource.status).toBe(422)
        expect(Object.keys(noSource.body.error.details)).toEqual(["source_channel_id"])
        const badAt = yield* run({ source_channel_id: source.id, at: "yesterday", activity: {} })
        expect(Object.keys(badAt.body.error.details)).toEqual(["at"])
        const badActivity = yield* run({ source_channel_id: source.id, activity: { type: "deliveryReceipt" } })
        expect(badActivity.status).toBe(422)
        expect(badActivity.body.error.code).toBe("invalid_message")
        expect((yield* run({ source_channel_id: other.source.id, activity: {} })).status).toBe(404)
        expect((yield* run({ source_channel_id: source.id, origin_channel_id: other.a.id, activity: {} })).status).toBe(404)
        expect((yield* run({ conversation_id: crypto.randomUUID(), activity: {} })).status).toBe(404)
        expect((yield* run({ activity: {} }, other.tenant.api_key)).status).toBe(422)
        expect((yield* run({ source_channel_id: source.id })).status).toBe(400)
      }))
  })

  describe("rules cache", () => {
    sqlIt("a second node sees created, changed and deleted rules and deleted channels within its polls", () =>
      Effect.gen(function*() {
        const { a, b, source, tenant } = yield* setup
        const scope = yield* Scope.make()
        const [port, runnerPort] = yield* freePorts(2)
        const node = yield* inProcessNode({ port, runnerPort })
        const there = Context.get(yield* Layer.buildWithScope(node, scope), RoutingRules)
        const activity = { type: "message", sender: "user", text: "hi", message_type: null, metadata: {}, source_channel_id: null }
        const plan = there.plan(tenant.id, activity, { origin_channel_id: source.id, metadata: {} }, null, new Date())
        const targets = plan.pipe(Effect.map((p) => p.deliveries.map((d) => d.channel_id).filter((id) => id !== source.id)))
        // Cached empty first, so the change must come by polling.
        expect(yield* targets).toEqual([])
        expect(yield* there.isCached(tenant.id)).toBe(true)
        const rule = yield* createRule(tenant.api_key, { source_channel_id: source.id, target_channel_ids: [a.id] })
        yield* eventually(targets, (t) => t.length === 1 && t[0] === a.id, { what: "created rule seen" })
        yield* rules(tenant.api_key, "PATCH", `/${rule.id}`, { routing_rule: { target_channel_ids: [a.id, b.id] } })
        yield* eventually(targets, (t) => t.length === 2, { what: "changed rule seen" })
        expect(yield* manage(tenant.api_key, "DELETE", `/channels/${b.id}`)).toMatchObject({ status: 204 })
        yield* eventually(targets, (t) => t.length === 1 && t[0] === a.id, { what: "deleted channel gone" })
        yield* rules(tenant.api_key, "DELETE", `/${rule.id}`)
        yield* eventually(targets, (t) => t.length === 0, { what: "deleted rule gone" })
        yield* Scope.close(scope, Effect.void as never)
      }))
  })
})
