import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Actor } from "../auth/Actor.js"
import { AppConfig } from "../config/AppConfig.js"
import { AuditLog } from "../db/AuditLog.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { inTransaction } from "../db/Transaction.js"
import { NotFound, type ValidationFailed } from "../domain/ApiError.js"
import { LOOKUP_LIMIT } from "../domain/LookupLimit.js"
import { Problems } from "../domain/Problems.js"
import { DEFAULT_RETENTION_DAYS, type SettingsInput, Tenant, TenantId, TenantStatus, TenantTier, type TenantInput } from "../domain/Tenant.js"
import { checkIfMatch, etagOf } from "../domain/Version.js"
import { ApiKeys } from "./ApiKeys.js"
import { type SettingsPatch, validateSettings } from "./TenantSettings.js"
import { sameJson } from "../domain/SameJson.js"

const TENANT_COLUMNS =
  "id, name, status, tier, retention_days, alert_webhook_url, allowed_upload_types, limits, inserted_at, updated_at"

const isStatus = Schema.is(TenantStatus)
const isTier = Schema.is(TenantTier)

interface TenantPatch extends SettingsPatch {
  name?: string
  status?: "active" | "inactive"
  tier?: "high" | "default" | "bulk"
}

/** The part of `patch` that differs from `current`, so that repeating a change changes nothing. */
const changedFields = (current: Tenant, patch: TenantPatch): TenantPatch =>
  Object.fromEntries(
    Object.entries(patch).filter(([field, value]) => !sameJson(current[field as keyof TenantPatch], value))
  ) as TenantPatch

/** 404 for a tenant id that names no tenant. */
export const tenantNotFound = (id: TenantId) => new NotFound({ message: `tenant ${id} not found` })

/** Tenants: created and changed by the operator (admin API) and, for settings, by the tenant itself. */
export class Tenants extends Effect.Service<Tenants>()("parley/Tenants", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* AuditLog
    const apiKeys = yield* ApiKeys
    const config = yield* AppConfig

    const findTenant = SqlSchema.findOne({
      Request: Schema.Struct({ id: TenantId, lock: Schema.Boolean }),
      Result: Tenant,
      execute: ({ id, lock }) =>
        sql`SELECT ${sql.literal(TENANT_COLUMNS)} FROM tenants WHERE id = ${id} ${sql.literal(lock ? "FOR UPDATE" : "")}`
    })

    const load = (id: TenantId, lock: boolean) =>
      findTenant({ id, lock }).pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.fail(tenantNotFound(id)), onSome: Effect.succeed }))
      )

    /** Checks every admin-settable field that was sent; `name` is required when creating. */
    const validate = (input: TenantInput, creating: boolean) =>
      Effect.gen(function*() {
        const problems = new Problems()
        const patch: TenantPatch = yield* validateSettings(input, problems)
        if (input.name !== undefined || creating) {
          const name = problems.requiredName("name", input.name)
          if (name !== undefined) patch.name = name
        }
        if (input.status !== undefined) {
          if (isStatus(input.status)) patch.status = input.status
          else problems.add("status", "must be active or inactive")
        }
        if (input.tier !== undefined) {
          if (isTier(input.tier)) patch.tier = input.tier
          else problems.add("tier", "must be high, default or bulk")
        }
        yield* problems.check()
        return patch
      })

    /** Creates a tenant and its primary key (returned once). */
    const create = (input: TenantInput, actor: Actor) =>
      Effect.gen(function*() {
        const patch = yield* validate(input, true)
        const id = TenantId.to.make(crypto.randomUUID())
        return yield* Effect.gen(function*() {
          yield* sql`
            INSERT INTO tenants (id, name, status, tier, retention_days, alert_webhook_url, allowed_upload_types, limits)
            VALUES (${id}, ${patch.name!}, ${patch.status ?? "active"}, ${patch.tier ?? "default"},
                    ${patch.retention_days ?? DEFAULT_RETENTION_DAYS}, ${patch.alert_webhook_url ?? null},
                    ${patch.allowed_upload_types ?? null}, ${patch.limits ?? {}})`
          const apiKey = yield* apiKeys.create(id, "primary", "primary", ["read", "write", "manage"], null, actor)
          yield* audit.record(actor, { tenantId: id, action: "tenant.created", resourceType: "tenant", resourceId: id, changes: patch })
          const tenant = yield* load(id, false)
          return { tenant, apiKey: apiKey.key }
        }).pipe(inTransaction(sql))
      }).pipe(orUnavailable)

    const listTenants = SqlSchema.findAll({
      Request: Schema.Void,
      Result: Tenant,
      execute: () => sql`SELECT ${sql.literal(TENANT_COLUMNS)} FROM tenants ORDER BY name, id LIMIT ${LOOKUP_LIMIT}`
    })

    const list = () => listTenants(undefined).pipe(orUnavailable)

    const get = (id: TenantId) => load(id, false).pipe(orUnavailable)

    /**
     * Applies a change: 404, then 412, then 422 (RFC 9110). Validation may resolve a webhook host, so it
     * runs before the row lock and `If-Match` is checked again under it; a no-op change writes nothing.
     */
    const applyChange = <R>(
      id: TenantId,
      validated: Effect.Effect<TenantPatch, ValidationFailed, R>,
      ifMatch: Option.Option<string>,
      actor: Actor,
      action: string
    ) =>
      Effect.gen(function*() {
        const before = yield* load(id, false)
        yield* checkIfMatch(ifMatch, etagOf(before))
        const patch = yield* validated
        return yield* Effect.gen(function*() {
          const current = yield* load(id, true)
          yield* checkIfMatch(ifMatch, etagOf(current))
          const changes = changedFields(current, patch)
          if (Object.keys(changes).length === 0) return current
          yield* sql`UPDATE tenants SET ${sql.update(changes as Record<string, unknown>)}, updated_at = now() WHERE id = ${id}`
          yield* audit.record(actor, { tenantId: id, action, resourceType: "tenant", resourceId: id, changes })
          return yield* load(id, false)
        }).pipe(inTransaction(sql))
      }).pipe(orUnavailable)

    /** Admin update of any field; `status=inactive` blocks every key of the tenant at once. */
    const update = (id: TenantId, input: TenantInput, ifMatch: Option.Option<string>, actor: Actor) =>
      applyChange(id, validate(input, false), ifMatch, actor, "tenant.updated")

    /** The tenant's own settings change; invalid `limits` reject the whole request. */
    const updateSettings = (id: TenantId, input: SettingsInput, ifMatch: Option.Option<string>, actor: Actor) =>
      applyChange(
        id,
        Effect.gen(function*() {
          const problems = new Problems()
          const patch = yield* validateSettings(input, problems)
          yield* problems.check()
          return patch
        }),
        ifMatch,
        actor,
        "settings.updated"
      )

    /** Removes the tenant and what it owns (foreign keys cascade); activities are purged later (ConversationPurge). */
    const remove = (id: TenantId, ifMatch: Option.Option<string>, actor: Actor) =>
      Effect.gen(function*() {
        const current = yield* load(id, true)
        yield* checkIfMatch(ifMatch, etagOf(current))
        yield* sql`DELETE FROM tenants WHERE id = ${id}`
        yield* audit.record(actor, { tenantId: id, action: "tenant.deleted", resourceType: "tenant", resourceId: id })
      }).pipe(inTransaction(sql), orUnavailable)

    /** A new primary key, returned once; the old one works for `API_KEY_ROTATION_GRACE_SECONDS`. */
    const rotateApiKey = (id: TenantId, actor: Actor) =>
      Effect.gen(function*() {
        const tenant = yield* load(id, true)
        const key = yield* apiKeys.rotatePrimary(id, config.apiKeyRotationGraceSeconds, actor)
        yield* audit.record(actor, { tenantId: id, action: "tenant.api_key_rotated", resourceType: "tenant", resourceId: id })
        return { tenant, apiKey: key }
      }).pipe(inTransaction(sql), orUnavailable)

    return { create, list, get, update, updateSettings, remove, rotateApiKey } as const
  }),
  dependencies: [AuditLog.Default, ApiKeys.Default]
}) {}
