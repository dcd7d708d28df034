import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Actor } from "../auth/Actor.js"
import { generateCredential, hashCredential, shownPrefix } from "../auth/Credential.js"
import { AuditLog } from "../db/AuditLog.js"
import { ParentRows } from "../db/ParentRows.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { inTransaction } from "../db/Transaction.js"
import { NotFound } from "../domain/ApiError.js"
import { ChannelId } from "../domain/Channel.js"
import { LOOKUP_LIMIT } from "../domain/LookupLimit.js"
import { Problems } from "../domain/Problems.js"
import { sameJson } from "../domain/SameJson.js"
import {
  MAX_ALLOWED_ORIGINS,
  type NewPublishableKeyInput,
  normalizeOrigin,
  PublishableKey,
  type PublishableKeyInput,
  PublishableKeyStatus
} from "../domain/PublishableKey.js"
import { TenantId } from "../domain/Tenant.js"

const KEY_COLUMNS = "id, channel_id, name, prefix, allowed_origins, status, inserted_at, updated_at"

const isStatus = Schema.is(PublishableKeyStatus)

/** Column values of a validated change; only what was sent. */
interface KeyPatch {
  name?: string
  allowed_origins?: ReadonlyArray<string>
  status?: PublishableKeyStatus
}

const checkName = (name: string | undefined, problems: Problems, patch: KeyPatch) => {
  const checked = problems.requiredName("name", name)
  if (checked !== undefined) patch.name = checked
}

const checkOrigins = (origins: ReadonlyArray<string>, problems: Problems, patch: KeyPatch) => {
  if (origins.length > MAX_ALLOWED_ORIGINS) {
    problems.add("allowed_origins", `must have at most ${MAX_ALLOWED_ORIGINS} origins`)
    return
  }
  const normalized: Array<string> = []
  for (const origin of origins) {
    Option.match(normalizeOrigin(origin), {
      onNone: () =>
        problems.add("allowed_origins", `${JSON.stringify(origin)} is not an origin like https://app.example.com`),
      onSome: (value) => normalized.push(value)
    })
  }
  patch.allowed_origins = [...new Set(normalized)]
}

/** A fresh key: the raw value (returned once) and what is stored of it. */
const freshKey = () => {
  const key = generateCredential("publishableKey")
  return { key, prefix: shownPrefix(key), hash: hashCredential(key) }
}

/** Publishable keys of a tenant's channels (CONTRACT.md §3). Only hashes are stored. */
export class PublishableKeys extends Effect.Service<PublishableKeys>()("parley/PublishableKeys", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* AuditLog
    const parents = yield* ParentRows

    const listKeys = SqlSchema.findAll({
      Request: Schema.Struct({ tenantId: TenantId, channelId: ChannelId }),
      Result: PublishableKey,
      execute: ({ channelId, tenantId }) =>
        sql`SELECT ${sql.literal(KEY_COLUMNS)} FROM publishable_keys
            WHERE tenant_id = ${tenantId} AND channel_id = ${channelId}
            ORDER BY inserted_at, id LIMIT ${LOOKUP_LIMIT}`
    })

    const insertKey = SqlSchema.single({
      Request: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
      Result: PublishableKey,
      execute: (columns) => sql`INSERT INTO publishable_keys ${sql.insert(columns)} RETURNING ${sql.literal(KEY_COLUMNS)}`
    })

    /** One key of the channel, locked for the change about to be made to it. */
    const lockKey = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: TenantId, channelId: ChannelId, id: Schema.String }),
      Result: PublishableKey,
      execute: ({ channelId, id, tenantId }) =>
        sql`SELECT ${sql.literal(KEY_COLUMNS)} FROM publishable_keys
            WHERE tenant_id = ${tenantId} AND channel_id = ${channelId} AND id = ${id} FOR UPDATE`
    })

    const updateKey = SqlSchema.findOne({
      Request: Schema.Struct({
        tenantId: TenantId,
        channelId: ChannelId,
        id: Schema.String,
        columns: Schema.Record({ key: Schema.String, value: Schema.Unknown })
      }),
      Result: PublishableKey,
      execute: ({ channelId, columns, id, tenantId }) =>
        // An empty change still answers with the key (and 404 without one), but leaves it as it is.
        sql`UPDATE publishable_keys
            SET ${Object.keys(columns).length === 0 ? sql`updated_at = updated_at` : sql`${sql.update(columns)}, updated_at = now()`}
            WHERE tenant_id = ${tenantId} AND channel_id = ${channelId} AND id = ${id}
            RETURNING ${sql.literal(KEY_COLUMNS)}`
    })

    const findUsable = SqlSchema.findOne({
      Request: Schema.Uint8ArrayFromSelf,
      Result: Schema.Struct({ tenant_id: TenantId, channel_id: ChannelId, allowed_origins: Schema.Array(Schema.String) }),
      execute: (hash) =>
        sql`SELECT k.tenant_id, k.channel_id, k.allowed_origins
            FROM publishable_keys k JOIN channels c ON c.id = k.channel_id JOIN tenants t ON t.id = k.tenant_id
            WHERE k.key_hash = ${hash} AND k.status = 'active' AND c.status = 'active' AND t.status = 'active'`
    })

    /** The channel and origins of a key value, while the key, its channel and its tenant are active. */
    const authenticate = (key: string) => findUsable(hashCredential(key)).pipe(orUnavailable)

    const keyNotFound = (id: string) => new NotFound({ message: `publishable key ${id} not found` })

    // Locked: the channel cannot be deleted while a key is being added to it (404 if it went first).
    const requireChannel = (tenantId: TenantId, channelId: ChannelId) =>
      Effect.asVoid(parents.lockChannel(tenantId, channelId))

    /** Applies column changes to a key of the channel and audits them; 404 when there is no such key. */
    const change = (
      tenantId: TenantId,
      channelId: ChannelId,
      id: string,
      columns: Record<string, unknown>,
      action: string,
      changes: unknown,
      actor: Actor
    ) =>
      Effect.gen(function*() {
        const updated = yield* updateKey({ tenantId, channelId, id, columns })
        if (Option.isNone(updated)) return yield* keyNotFound(id)
        yield* audit.record(actor, { tenantId, action, resourceType: "publishable_key", resourceId: id, changes })
        return updated.value
      })

    /**
     * Issues a key for the channel; the key is returned here once. `TenantGone` when the tenant was
     * deleted meanwhile (its row is locked first, in the order a tenant delete takes them).
     */
    const create = (tenantId: TenantId, channelId: ChannelId, input: NewPublishableKeyInput, actor: Actor) =>
      Effect.gen(function*() {
        const { hash, key, prefix } = freshKey()
        return yield* Effect.gen(function*() {
          yield* parents.lockTenant(tenantId, actor)
          yield* requireChannel(tenantId, channelId)
          // After the channel check, so that an unknown channel is 404 whatever the body; pure.
          const problems = new Problems()
          const patch: KeyPatch = {}
          checkName(input.name, problems, patch)
          checkOrigins(input.allowed_origins ?? [], problems, patch)
          yield* problems.check()
          const created = yield* insertKey({
            id: crypto.randomUUID(),
            tenant_id: tenantId,
            channel_id: channelId,
            name: patch.name,
            prefix,
            key_hash: hash,
            allowed_origins: patch.allowed_origins
          })
          yield* audit.record(actor, {
            tenantId,
            action: "publishable_key.created",
            resourceType: "publishable_key",
            resourceId: created.id,
            changes: { channel_id: channelId, ...patch }
          })
          return { publishableKey: created, key }
        }).pipe(inTransaction(sql))
      }).pipe(orUnavailable)

    /** The channel's keys, oldest first, without their values. */
    const list = (tenantId: TenantId, channelId: ChannelId) =>
      parents.readChannel(tenantId, channelId).pipe(Effect.zipRight(listKeys({ tenantId, channelId })), orUnavailable)

    /**
     * Changes `name`, `allowed_origins` (replaced as a whole) or `status`; only sent fields. An unknown
     * key is 404 whatever the body, as on the other resources; an invalid body is 422.
     */
    const update = (tenantId: TenantId, channelId: ChannelId, id: string, input: PublishableKeyInput, actor: Actor) =>
      Effect.gen(function*() {
        const current = yield* lockKey({ tenantId, channelId, id })
        if (Option.isNone(current)) return yield* keyNotFound(id)
        // Pure, so it may run under the row lock.
        const problems = new Problems()
        const patch: KeyPatch = {}
        if (input.name !== undefined) checkName(input.name, problems, patch)
        if (input.allowed_origins !== undefined) checkOrigins(input.allowed_origins, problems, patch)
        if (input.status !== undefined) {
          if (isStatus(input.status)) patch.status = input.status
          else problems.add("status", "must be active or disabled")
        }
        yield* problems.check()
        // Only what differs is written: repeating a change leaves the key (and its updated_at) as it is.
        const changed: KeyPatch = Object.fromEntries(
          Object.entries(patch).filter(([field, value]) => !sameJson(current.value[field as keyof KeyPatch], value))
        )
        if (Object.keys(changed).length === 0) return current.value
        return yield* change(tenantId, channelId, id, { ...changed }, "publishable_key.updated", changed, actor)
      }).pipe(inTransaction(sql), orUnavailable)

    /** A new key value, returned once; the old value stops working when this commits. */
    const rotate = (tenantId: TenantId, channelId: ChannelId, id: string, actor: Actor) =>
      Effect.gen(function*() {
        const { hash, key, prefix } = freshKey()
        const rotated = yield* change(
          tenantId,
          channelId,
          id,
          { key_hash: hash, prefix },
          "publishable_key.rotated",
          { prefix },
          actor
        ).pipe(inTransaction(sql))
        return { publishableKey: rotated, key }
      }).pipe(orUnavailable)

    /** Deletes the key at once. */
    const remove = (tenantId: TenantId, channelId: ChannelId, id: string, actor: Actor) =>
      Effect.gen(function*() {
        const rows = yield* sql<{ id: string }>`
          DELETE FROM publishable_keys WHERE tenant_id = ${tenantId} AND channel_id = ${channelId} AND id = ${id}
          RETURNING id`
        if (rows.length === 0) return yield* keyNotFound(id)
        yield* audit.record(actor, { tenantId, action: "publishable_key.deleted", resourceType: "publishable_key", resourceId: id })
      }).pipe(inTransaction(sql), orUnavailable)

    return { create, list, update, rotate, remove, authenticate } as const
  }),
  dependencies: [AuditLog.Default, ParentRows.Default]
}) {}
