import { SqlClient, SqlSchema } from "@effect/sql"
import { Data, Effect, Option, Predicate, Schema } from "effect"
import type { Actor } from "../auth/Actor.js"
import { generateCredential, hashCredential } from "../auth/Credential.js"
import { AuditLog } from "../db/AuditLog.js"
import { ParentRows } from "../db/ParentRows.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { inTransaction } from "../db/Transaction.js"
import { AddressGuard } from "../delivery/AddressGuard.js"
import { ChannelDeliveries } from "../delivery/ChannelDeliveries.js"
import { Conflict, NotFound } from "../domain/ApiError.js"
import {
  Channel,
  ChannelId,
  type ChannelInput,
  DEFAULT_RETRY_POLICY,
  StoredRetryPolicy
} from "../domain/Channel.js"
import { LOOKUP_LIMIT } from "../domain/LookupLimit.js"
import { redactObject } from "../domain/Redaction.js"
import { TenantId } from "../domain/Tenant.js"
import { checkIfMatch, etagOf } from "../domain/Version.js"
import { ChannelSecrets } from "./ChannelSecrets.js"
import { type ChannelBase, type ChannelPatch, validateChannel } from "./ChannelValidation.js"
import { sameJson } from "../domain/SameJson.js"
import { RoutingRules } from "../routing/RoutingRules.js"

const CHANNEL_COLUMNS = "id, tenant_id, name, type, mode, status, require_signature, config, transformations, " +
  "retry_policy, rate_limit, circuit_state, inserted_at, updated_at"

/** A stored channel: like the API shape, but with the config unredacted. */
const ChannelRow = Schema.Struct({ ...Channel.fields, retry_policy: StoredRetryPolicy })
type ChannelRow = typeof ChannelRow.Type

/** What a new channel starts from; `name` always comes from the request. */
const NEW_CHANNEL = {
  type: "webhook",
  mode: "duplex",
  status: "active",
  require_signature: true,
  config: {},
  transformations: [],
  retry_policy: DEFAULT_RETRY_POLICY,
  rate_limit: null
} as const satisfies Omit<Required<ChannelPatch>, "name">

const JSON_COLUMNS: ReadonlySet<string> = new Set(["config", "transformations", "retry_policy", "rate_limit"])

/** Column values of a patch: jsonb columns as JSON text (a null rate limit stays SQL NULL). */
const columnsOf = (patch: ChannelPatch): Record<string, unknown> =>
  Object.fromEntries(
    Object.entries(patch).map(([key, value]) => [key, JSON_COLUMNS.has(key) && value !== null ? JSON.stringify(value) : value])
  )

/** The part of `patch` that differs from the stored row, so that repeating a change changes nothing. */
const changedFields = (current: ChannelRow, patch: ChannelPatch): ChannelPatch =>
  Object.fromEntries(
    Object.entries(patch).filter(([field, value]) => !sameJson(current[field as keyof ChannelPatch], value))
  ) as ChannelPatch

/** The patch as the audit log keeps it: never a credential. */
const auditedChanges = (patch: ChannelPatch) =>
  patch.config === undefined ? patch : { ...patch, config: redactObject(patch.config) }

const toChannel = (row: ChannelRow) => new Channel({ ...row, config: redactObject(row.config) })

/** The version `If-Match` is compared with: the ETag of what the API shows. */
const versionOf = (row: ChannelRow) => etagOf(toChannel(row))

/** The channel was written by someone else between validation and the row lock. */
class ChannelChanged extends Data.TaggedError("ChannelChanged") {}

/** A channel and its secret, returned once. */
export interface IssuedChannelSecret {
  readonly channel: Channel
  readonly secret: string
}

/** A tenant's channels (management API): configs validated per type, secrets stored as hashes (and sealed for signing). */
export class Channels extends Effect.Service<Channels>()("parley/Channels", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* AuditLog
    const guard = yield* AddressGuard
    const parents = yield* ParentRows
    const secrets = yield* ChannelSecrets
    const loops = yield* ChannelDeliveries
    const rules = yield* RoutingRules

    const findChannel = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: TenantId, id: ChannelId, lock: Schema.Boolean }),
      Result: ChannelRow,
      execute: ({ id, lock, tenantId }) =>
        sql`SELECT ${sql.literal(CHANNEL_COLUMNS)} FROM channels WHERE tenant_id = ${tenantId} AND id = ${id}
            ${sql.literal(lock ? "FOR UPDATE" : "")}`
    })

    const listChannels = SqlSchema.findAll({
      Request: TenantId,
      Result: ChannelRow,
      execute: (tenantId) =>
        sql`SELECT ${sql.literal(CHANNEL_COLUMNS)} FROM channels WHERE tenant_id = ${tenantId}
            ORDER BY name, id LIMIT ${LOOKUP_LIMIT}`
    })

    const insertChannel = SqlSchema.single({
      Request: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
      Result: ChannelRow,
      execute: (columns) => sql`INSERT INTO channels ${sql.insert(columns)} RETURNING ${sql.literal(CHANNEL_COLUMNS)}`
    })

    const replaceSecret = SqlSchema.findOne({
      Request: Schema.Struct({
        tenantId: TenantId,
        id: ChannelId,
        hash: Schema.Uint8ArrayFromSelf,
        sealed: Schema.Uint8ArrayFromSelf
      }),
      Result: ChannelRow,
      execute: ({ hash, id, sealed, tenantId }) =>
        sql`UPDATE channels SET secret_hash = ${hash}, secret_sealed = ${sealed}, updated_at = now()
            WHERE tenant_id = ${tenantId} AND id = ${id} RETURNING ${sql.literal(CHANNEL_COLUMNS)}`
    })

    const notFound = (id: ChannelId) => new NotFound({ message: `channel ${id} not found` })

    const load = (tenantId: TenantId, id: ChannelId, lock: boolean) =>
      findChannel({ tenantId, id, lock }).pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.fail(notFound(id)), onSome: Effect.succeed }))
      )

    const validate = (input: ChannelInput, base: ChannelBase, creating: boolean) =>
      validateChannel(input, base, creating).pipe(Effect.provideService(AddressGuard, guard))

    /** Creates a channel; its secret is returned here once. `TenantGone` when the tenant was deleted meanwhile. */
    const create = (tenantId: TenantId, input: ChannelInput, actor: Actor) =>
      Effect.gen(function*() {
        const patch = yield* validate(input, NEW_CHANNEL, true)
        const secret = generateCredential("channelSecret")
        const id = crypto.randomUUID()
        return yield* Effect.gen(function*() {
          yield* parents.lockTenant(tenantId, actor)
          const row = yield* insertChannel({
            ...columnsOf({ ...NEW_CHANNEL, ...patch }),
            id,
            tenant_id: tenantId,
            secret_hash: hashCredential(secret),
            secret_sealed: secrets.seal(id, secret)
          })
          yield* audit.record(actor, {
            tenantId,
            action: "channel.created",
            resourceType: "channel",
            resourceId: row.id,
            changes: auditedChanges(patch)
          })
          return { channel: toChannel(row), secret } satisfies IssuedChannelSecret
        }).pipe(inTransaction(sql))
      }).pipe(orUnavailable)

    /** The tenant's channels by name, at most `LOOKUP_LIMIT`. */
    const list = (tenantId: TenantId) => listChannels(tenantId).pipe(Effect.map((rows) => rows.map(toChannel)), orUnavailable)

    const get = (tenantId: TenantId, id: ChannelId) => load(tenantId, id, false).pipe(Effect.map(toChannel), orUnavailable)

    // Validation may resolve a webhook host, so it runs before the row lock is taken; the write then
    // proceeds only if the channel is still the version that was validated.
    const attemptUpdate = (tenantId: TenantId, id: ChannelId, input: ChannelInput, ifMatch: Option.Option<string>, actor: Actor) =>
      Effect.gen(function*() {
        const current = yield* load(tenantId, id, false)
        const version = versionOf(current)
        yield* checkIfMatch(ifMatch, version)
        const patch = yield* validate(input, current, false)
        return yield* Effect.gen(function*() {
          const locked = yield* load(tenantId, id, true)
          if (versionOf(locked) !== version) return yield* new ChannelChanged()
          // Idempotent: a change already in place writes nothing, keeping updated_at and the ETag.
          const changes = changedFields(locked, patch)
          if (Object.keys(changes).length === 0) return toChannel(locked)
          yield* sql`UPDATE channels SET ${sql.update(columnsOf(changes))}, updated_at = now() WHERE id = ${id}`
          yield* audit.record(actor, {
            tenantId,
            action: "channel.updated",
            resourceType: "channel",
            resourceId: id,
            changes: auditedChanges(changes)
          })
          return toChannel(yield* load(tenantId, id, false))
        }).pipe(inTransaction(sql))
      })

    /** PUT and PATCH: sent fields are set, the others kept; nothing is written when nothing changes; honours `If-Match`. */
    const update = (tenantId: TenantId, id: ChannelId, input: ChannelInput, ifMatch: Option.Option<string>, actor: Actor) =>
      attemptUpdate(tenantId, id, input, ifMatch, actor).pipe(
        Effect.retry({ times: 2, while: Predicate.isTagged("ChannelChanged") }),
        Effect.catchTag("ChannelChanged", () =>
          Effect.fail(new Conflict({ message: "the channel kept changing during the update, retry" }))),
        // Made active again, or its target or rate limit fixed: its loop takes the change in at once.
        Effect.tap(() => loops.recheck(id)),
        orUnavailable
      )

    /**
     * Deletes the channel with its conversations and keys (foreign keys cascade) and takes it out of
     * the tenant's routing rules (`RoutingRules.dropChannel`); the conversations' activities and
     * deliveries are purged in the background (ConversationPurge).
     */
    const remove = (tenantId: TenantId, id: ChannelId, ifMatch: Option.Option<string>, actor: Actor) =>
      Effect.gen(function*() {
        yield* rules.dropChannel(tenantId, id, actor)
        const current = yield* load(tenantId, id, true)
        yield* checkIfMatch(ifMatch, versionOf(current))
        yield* sql`DELETE FROM channels WHERE id = ${id}`
        yield* audit.record(actor, {
          tenantId,
          action: "channel.deleted",
          resourceType: "channel",
          resourceId: id,
          changes: { name: current.name, type: current.type }
        })
      }).pipe(inTransaction(sql), Effect.tap(() => rules.forget(tenantId)), orUnavailable)

    /** A new secret, returned once; the old one stops working when this commits. */
    const rotateSecret = (tenantId: TenantId, id: ChannelId, actor: Actor) =>
      Effect.gen(function*() {
        const secret = generateCredential("channelSecret")
        const row = yield* replaceSecret({ tenantId, id, hash: hashCredential(secret), sealed: secrets.seal(id, secret) }).pipe(
          Effect.flatMap(Option.match({ onNone: () => Effect.fail(notFound(id)), onSome: Effect.succeed }))
        )
        yield* audit.record(actor, { tenantId, action: "channel.secret_rotated", resourceType: "channel", resourceId: id })
        return { channel: toChannel(row), secret } satisfies IssuedChannelSecret
      }).pipe(inTransaction(sql), orUnavailable)

    return { create, list, get, update, remove, rotateSecret } as const
  }),
  dependencies: [AuditLog.Default, ParentRows.Default, ChannelSecrets.Default]
}) {}
