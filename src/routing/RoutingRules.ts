import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Actor } from "../auth/Actor.js"
import type { TenantCredential } from "../auth/TenantCredential.js"
import { AuditLog } from "../db/AuditLog.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { inTransaction } from "../db/Transaction.js"
import { ChannelMode, Transformation } from "../domain/Channel.js"
import { NotFound } from "../domain/ApiError.js"
import { LOOKUP_LIMIT } from "../domain/LookupLimit.js"
import { Problems } from "../domain/Problems.js"
import type { TenantId } from "../domain/Tenant.js"
import { sameJson } from "../domain/SameJson.js"
import { failureLog } from "../ops/FailureLog.js"
import { JobRunner } from "../ops/JobRunner.js"
import { compileStored, type RoutingSubject } from "./Conditions.js"
import { type PlanActivity, type PlannedChannel, type PlannedRule, type Planner, planRouting } from "./RoutingPlan.js"
import { RoutingRule, type RoutingRuleInput, type RuleFields } from "./RoutingRule.js"
import { checkRuleFields, closesCycle } from "./RuleValidation.js"

/** Timestamps to the second, as server-apis.md shows a rule's. */
const SECONDS = `'YYYY-MM-DD"T"HH24:MI:SS"Z"'`
const RULE_COLUMNS = "id::text, tenant_id::text, name, source_channel_id::text, target_channel_ids::text[], enabled, " +
  "conditions, transformations, priority, stop_processing, " +
  `to_char(inserted_at AT TIME ZONE 'UTC', ${SECONDS}) AS inserted_at, ` +
  `to_char(updated_at AT TIME ZONE 'UTC', ${SECONDS}) AS updated_at`

const decodeRules = Schema.decodeUnknown(Schema.Array(RoutingRule))
const ChannelRow = Schema.Struct({
  id: Schema.String,
  mode: ChannelMode,
  status: Schema.Literal("active", "inactive"),
  transformations: Schema.Array(Transformation)
})
const decodeChannels = Schema.decodeUnknown(Schema.Array(ChannelRow))
const VersionRow = Schema.Struct({ tenant_id: Schema.String, version: Schema.String })
const decodeVersions = Schema.decodeUnknown(Schema.Array(VersionRow))

/** How often a node compares the versions of the tenants it caches: well inside the one second promised. */
export const POLL_INTERVAL_MS = 250
/** Tenants whose rules a node keeps; the least recently planned one is dropped past this. */
export const CACHED_TENANTS = 1000
/** A node that has not compared versions for this long reads rules afresh rather than trust its cache. */
const STALE_AFTER_MS = 2000

/** What a node keeps per tenant: everything a plan reads, and the version it was read at. */
interface TenantRouting {
  readonly version: string
  readonly rules: ReadonlyArray<PlannedRule>
  readonly channels: ReadonlyMap<string, PlannedChannel>
}

const notFound = (id: string) => new NotFound({ message: `routing rule ${id} not found` })

const plannedRule = (rule: RoutingRule): PlannedRule => ({ ...rule, condition: compileStored(rule.conditions) })

/** The parts of an audited rule change (no secrets in a rule). */
const fieldsOf = (rule: RoutingRule): RuleFields => ({
  name: rule.name,
  source_channel_id: rule.source_channel_id,
  target_channel_ids: rule.target_channel_ids,
  enabled: rule.enabled,
  conditions: rule.conditions,
  transformations: rule.transformations,
  priority: rule.priority,
  stop_processing: rule.stop_processing
})

/** The conversation and participant a plan reads (CONTRACT.md §8 fields). */
export interface PlanConversation {
  readonly origin_channel_id: string
  readonly metadata: Readonly<Record<string, unknown>>
}

/**
 * A tenant's routing rules (tenant API) and the per-tenant cache plans are made from. Every node polls
 * a cheap version of each cached tenant's rules and channels (row count and a hash over ids and `xmin`,
 * which every insert and update changes) and drops a tenant whose version moved, so a change made on
 * any node is seen everywhere within a poll; no LISTEN/NOTIFY.
 */
export class RoutingRules extends Effect.Service<RoutingRules>()("parley/RoutingRules", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* AuditLog
    const jobs = yield* JobRunner
    // Insertion order is recency: a hit is moved to the end, the first key is the oldest.
    const cache = new Map<string, TenantRouting>()
    let comparedAt = Date.now()

    const versionsOf = (tenantIds: ReadonlyArray<string>) =>
      sql`
        SELECT t.id::text AS tenant_id,
          (SELECT count(*)::text || ':' || coalesce(sum(hashtextextended(r.id::text || ':' || r.xmin::text, 0)), 0)::text
             FROM routing_rules r WHERE r.tenant_id = t.id) || '/' ||
          (SELECT count(*)::text || ':' || coalesce(sum(hashtextextended(c.id::text || ':' || c.xmin::text, 0)), 0)::text
             FROM channels c WHERE c.tenant_id = t.id) AS version
        FROM unnest(${tenantIds}::uuid[]) AS t(id)`.pipe(Effect.flatMap(decodeVersions))

    /** Reads a tenant's routing; the version first, so what is read is never older than the version kept. */
    const load = (tenantId: string) =>
      Effect.gen(function*() {
        const [versionRow] = yield* versionsOf([tenantId])
        const rules = yield* sql`SELECT ${sql.literal(RULE_COLUMNS)} FROM routing_rules
          WHERE tenant_id = ${tenantId} AND enabled`.pipe(Effect.flatMap(decodeRules))
        const channels = yield* sql`SELECT id::text, mode, status, transformations FROM channels
          WHERE tenant_id = ${tenantId}`.pipe(Effect.flatMap(decodeChannels))
        return {
          version: versionRow?.version ?? "",
          rules: rules.map(plannedRule),
          channels: new Map(channels.map((c) => [c.id, c]))
        } satisfies TenantRouting
      })

    /** The tenant's routing, from the cache while it is being kept current, else read (and cached). */
    const routingOf = (tenantId: string) =>
      Effect.suspend(() => {
        const cached = cache.get(tenantId)
        const fresh = Date.now() - comparedAt <= STALE_AFTER_MS
        if (cached !== undefined && fresh) {
          cache.delete(tenantId)
          cache.set(tenantId, cached)
          return Effect.succeed(cached)
        }
        return Effect.tap(load(tenantId), (routing) =>
          Effect.sync(() => {
            cache.delete(tenantId)
            cache.set(tenantId, routing)
            while (cache.size > CACHED_TENANTS) cache.delete(cache.keys().next().value!)
          }))
      })

    /** Drops every cached tenant whose version moved (a rule or channel written, added or deleted). */
    const compare = Effect.gen(function*() {
      const started = Date.now()
      const tenantIds = [...cache.keys()]
      if (tenantIds.length > 0) {
        const versions = yield* versionsOf(tenantIds)
        for (const { tenant_id, version } of versions) {
          if (cache.get(tenant_id)?.version !== version) cache.delete(tenant_id)
        }
      }
      comparedAt = started
    })
    const compareLog = failureLog("routing rule versions could not be read", "routing rule versions can be read again")
    yield* jobs.every(
      "follow_routing_rules",
      `${POLL_INTERVAL_MS} millis`,
      compare.pipe(Effect.matchCauseEffect({ onFailure: compareLog.failed, onSuccess: () => compareLog.succeeded })),
      { fixedRate: true }
    )

    /**
     * The tenant's planner over its cached rules and channels (RoutingPlan.planRouting): each plan
     * gives the matching rules in order and each target's transformed copy. Reads no rules while the
     * cache is current, so an append's round plans its whole group from one lookup.
     */
    const planner = (tenantId: TenantId) =>
      routingOf(tenantId).pipe(
        Effect.map(({ channels, rules }): Planner => (activity, conversation, participant, at) =>
          planRouting({ activity, conversation, participant, at, rules, channels })),
        orUnavailable
      )

    /** The plan of one activity (dry_run): the same planner appends use. */
    const plan = <A extends PlanActivity>(
      tenantId: TenantId,
      activity: A,
      conversation: PlanConversation,
      participant: RoutingSubject["participant"],
      at: Date
    ) => Effect.map(planner(tenantId), (planOne) => planOne(activity, conversation, participant, at))

    // A channel token reaches only its own channel: the rules whose source it is.
    const visible = (credential: TenantCredential, rule: RoutingRule) =>
      credential.channelId === null || credential.channelId === rule.source_channel_id

    const findRule = (tenantId: string, id: string, lock: boolean) =>
      sql`SELECT ${sql.literal(RULE_COLUMNS)} FROM routing_rules WHERE tenant_id = ${tenantId} AND id = ${id}
          ${sql.literal(lock ? "FOR UPDATE" : "")}`.pipe(
        Effect.flatMap(decodeRules),
        Effect.map((rows) => Option.fromNullable(rows[0]))
      )

    const load1 = (credential: TenantCredential, id: string, lock: boolean) =>
      findRule(credential.tenantId, id, lock).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.fail(notFound(id)),
          onSome: (rule) => (visible(credential, rule) ? Effect.succeed(rule) : Effect.fail(notFound(id)))
        }))
      )

    /** The rules by name, at most `LOOKUP_LIMIT`. */
    const list = (credential: TenantCredential) =>
      sql`SELECT ${sql.literal(RULE_COLUMNS)} FROM routing_rules WHERE tenant_id = ${credential.tenantId}
          ${credential.channelId === null ? sql`` : sql`AND source_channel_id = ${credential.channelId}`}
          ORDER BY name, id LIMIT ${LOOKUP_LIMIT}`.pipe(Effect.flatMap(decodeRules), orUnavailable)

    const get = (credential: TenantCredential, id: string) => load1(credential, id, false).pipe(orUnavailable)

    /** The checks that read the tenant's channels and rules (server-apis.md "Routing rules"), under the tenant's rule lock. */
    const checkReferences = (credential: TenantCredential, fields: RuleFields, selfId: string, problems: Problems) =>
      Effect.gen(function*() {
        const ids = [fields.source_channel_id, ...fields.target_channel_ids]
        const rows = yield* sql<{ id: string; mode: string }>`
          SELECT id::text, mode FROM channels WHERE tenant_id = ${credential.tenantId} AND id = ANY(${ids}::uuid[])`
        const modes = new Map(rows.map((row) => [row.id, row.mode]))
        const sourceMode = modes.get(fields.source_channel_id)
        if (credential.channelId !== null && fields.source_channel_id !== credential.channelId) {
          problems.add("source_channel_id", "must be the channel of the channel token")
        } else if (sourceMode === undefined) problems.add("source_channel_id", "must be a channel of this tenant")
        else if (sourceMode === "outbound") problems.add("source_channel_id", "must be a channel that can receive (mode inbound or duplex)")
        const unknown = fields.target_channel_ids.filter((id) => !modes.has(id))
        if (unknown.length > 0) problems.add("target_channel_ids", `must be channels of this tenant: ${unknown.join(", ")} is not`)
        const inboundOnly = fields.target_channel_ids.filter((id) => modes.get(id) === "inbound")
        if (inboundOnly.length > 0) problems.add("target_channel_ids", `must not be inbound-only channels: ${inboundOnly.join(", ")}`)
        const named = yield* sql`SELECT 1 FROM routing_rules
          WHERE tenant_id = ${credential.tenantId} AND name = ${fields.name} AND id <> ${selfId}`
        if (named.length > 0) problems.add("name", "is already taken by another rule of this tenant")
        if (fields.enabled) {
          const edges = yield* sql<{ source: string; targets: Array<string> }>`
            SELECT source_channel_id::text AS source, target_channel_ids::text[] AS targets FROM routing_rules
            WHERE tenant_id = ${credential.tenantId} AND enabled AND id <> ${selfId}`
          if (closesCycle(edges, fields.source_channel_id, fields.target_channel_ids)) {
            problems.add("target_channel_ids", "would make the enabled rules route in a cycle")
          }
        }
        yield* problems.check()
      })

    // One writer per tenant at a time: cycle and name checks read the other rules (the tenant row is
    // not locked, so channel writes are not held up).
    const lockTenantRules = (tenantId: string) =>
      sql`SELECT pg_advisory_xact_lock(hashtextextended(${`routing_rules:${tenantId}`}, 0))`

    const columnsOf = (fields: RuleFields) => ({
      name: fields.name,
      source_channel_id: fields.source_channel_id,
      // An array literal the column's type parses (checked UUIDs only, RuleValidation).
      target_channel_ids: `{${fields.target_channel_ids.join(",")}}`,
      enabled: fields.enabled,
      conditions: JSON.stringify(fields.conditions),
      transformations: JSON.stringify(fields.transformations),
      priority: fields.priority,
      stop_processing: fields.stop_processing
    })

    /** Drops the tenant's cached routing, so this node's next plan reads what it has just written. */
    const forget = (tenantId: string) => Effect.sync(() => cache.delete(tenantId))

    const create = (credential: TenantCredential, input: RoutingRuleInput) =>
      Effect.gen(function*() {
        const problems = new Problems()
        const fields = checkRuleFields(input, {}, problems)
        yield* problems.check()
        const id = crypto.randomUUID()
        const rule = yield* Effect.gen(function*() {
          yield* lockTenantRules(credential.tenantId)
          yield* checkReferences(credential, fields, id, problems)
          yield* sql`INSERT INTO routing_rules ${sql.insert({ id, tenant_id: credential.tenantId, ...columnsOf(fields) })}`
          yield* audit.record(credential.actor, {
            tenantId: credential.tenantId,
            action: "routing_rule.created",
            resourceType: "routing_rule",
            resourceId: id,
            changes: fields
          })
          return yield* load1(credential, id, false)
        }).pipe(inTransaction(sql))
        yield* forget(credential.tenantId)
        return rule
      }).pipe(orUnavailable)

    /** PUT and PATCH: sent fields are set, the others kept, every check rerun; nothing is written when nothing changes. */
    const update = (credential: TenantCredential, id: string, input: RoutingRuleInput) =>
      Effect.gen(function*() {
        const rule = yield* Effect.gen(function*() {
          yield* lockTenantRules(credential.tenantId)
          const current = yield* load1(credential, id, true)
          const before = fieldsOf(current)
          const problems = new Problems()
          const fields = checkRuleFields(input, before, problems)
          yield* problems.check()
          yield* checkReferences(credential, fields, id, problems)
          const changes = Object.fromEntries(
            Object.entries(fields).filter(([key, value]) => !sameJson(before[key as keyof RuleFields], value))
          )
          if (Object.keys(changes).length === 0) return current
          yield* sql`UPDATE routing_rules SET ${sql.update(columnsOf(fields))}, updated_at = now() WHERE id = ${id}`
          yield* audit.record(credential.actor, {
            tenantId: credential.tenantId,
            action: "routing_rule.updated",
            resourceType: "routing_rule",
            resourceId: id,
            changes
          })
          return yield* load1(credential, id, false)
        }).pipe(inTransaction(sql))
        yield* forget(credential.tenantId)
        return rule
      }).pipe(orUnavailable)

    const remove = (credential: TenantCredential, id: string) =>
      Effect.gen(function*() {
        yield* Effect.gen(function*() {
          const current = yield* load1(credential, id, true)
          yield* sql`DELETE FROM routing_rules WHERE id = ${id}`
          yield* audit.record(credential.actor, {
            tenantId: credential.tenantId,
            action: "routing_rule.deleted",
            resourceType: "routing_rule",
            resourceId: id,
            changes: { name: current.name }
          })
        }).pipe(inTransaction(sql))
        yield* forget(credential.tenantId)
      }).pipe(orUnavailable)

    /**
     * Takes a channel about to be deleted out of the tenant's rules, inside the caller's transaction and
     * before it locks the channel row (the order rule writes take their locks in): rules whose source
     * it is, or whose only target it is, are deleted; the others lose it from `target_channel_ids`.
     * Audited as rule changes by the channel deletion's actor. Call `forget` after the commit.
     */
    const dropChannel = (tenantId: TenantId, channelId: string, actor: Actor) =>
      Effect.gen(function*() {
        yield* lockTenantRules(tenantId)
        const deleted = yield* sql<{ id: string; name: string }>`
          DELETE FROM routing_rules
          WHERE tenant_id = ${tenantId}
            AND (source_channel_id = ${channelId} OR target_channel_ids <@ ARRAY[${channelId}]::uuid[])
          RETURNING id::text, name`
        const narrowed = yield* sql<{ id: string; targets: Array<string> }>`
          UPDATE routing_rules SET target_channel_ids = array_remove(target_channel_ids, ${channelId}::uuid), updated_at = now()
          WHERE tenant_id = ${tenantId} AND ${channelId}::uuid = ANY(target_channel_ids)
          RETURNING id::text, target_channel_ids::text[] AS targets`
        const entry = { tenantId, resourceType: "routing_rule" }
        if (deleted.length > 0) {
          yield* audit.recordRows(actor, { ...entry, action: "routing_rule.deleted" }, deleted.map((rule) => ({
            resourceId: rule.id,
            changes: { name: rule.name }
          })))
        }
        if (narrowed.length > 0) {
          yield* audit.recordRows(actor, { ...entry, action: "routing_rule.updated" }, narrowed.map((rule) => ({
            resourceId: rule.id,
            changes: { target_channel_ids: rule.targets }
          })))
        }
      })

    /** Whether the tenant is cached on this node now (tests of the refresh). */
    const isCached = (tenantId: string) => Effect.sync(() => cache.has(tenantId))

    return { list, get, create, update, remove, plan, planner, dropChannel, forget, isCached } as const
  }),
  dependencies: [AuditLog.Default]
}) {}

