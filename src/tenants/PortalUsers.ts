import { SqlClient, SqlSchema } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option, Schema } from "effect"
import type { Actor } from "../auth/Actor.js"
import { hashPassword, passwordViolations } from "../auth/Password.js"
import { AuditLog } from "../db/AuditLog.js"
import { isUniqueViolation } from "../db/SqlErrors.js"
import { ParentRows } from "../db/ParentRows.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { inTransaction } from "../db/Transaction.js"
import { NotFound, ValidationFailed } from "../domain/ApiError.js"
import { LOOKUP_LIMIT } from "../domain/LookupLimit.js"
import { PortalUser, type UserChange, type UserInput, UserRole, UserStatus } from "../domain/PortalUser.js"
import { TenantId } from "../domain/Tenant.js"
import { isNameTooLong, NAME_TOO_LONG, Problems } from "../domain/Problems.js"
import { checkIfMatch, etagOf } from "../domain/Version.js"

const USER_COLUMNS = "id, tenant_id, email, name, role, status, totp_enabled, inserted_at, updated_at"

const isRole = Schema.is(UserRole)
const isStatus = Schema.is(UserStatus)

const localPart = /^[\p{L}\p{N}!#$%&'*+/=?^_`{|}~-]+(?:\.[\p{L}\p{N}!#$%&'*+/=?^_`{|}~-]+)*$/u
const hostLabel = /^[\p{L}\p{N}](?:[\p{L}\p{N}-]{0,61}[\p{L}\p{N}])?$/u

/** A sane address shape: a dot-atom local part, `@`, a host name of two or more labels. */
const isEmailAddress = (email: string) => {
  const at = email.lastIndexOf("@")
  const labels = email.slice(at + 1).split(".")
  return at > 0 && at <= 64 && email.length <= 254 && localPart.test(email.slice(0, at)) &&
    labels.length >= 2 && labels.every((label) => hostLabel.test(label))
}

/** Column values of a validated change; only the keys that were sent. */
type UserPatch = {
  email?: string
  name?: string | null
  role?: UserRole
  status?: UserStatus
}

/** Checks the fields that were sent (`email` is required on create) and collects their values. */
const validate = (input: UserChange, creating: boolean, problems: Problems): UserPatch => {
  const patch: UserPatch = {}
  if (input.email !== undefined || creating) {
    const email = input.email?.trim() ?? ""
    if (email.length === 0) problems.add("email", "is required")
    else if (!isEmailAddress(email)) problems.add("email", "must be an e-mail address")
    else patch.email = email
  }
  if (input.name !== undefined) {
    const name = input.name?.trim() ?? null
    if (name === null) patch.name = null
    else if (name.length === 0) problems.add("name", "must not be blank (null for no name)")
    else if (isNameTooLong(name)) problems.add("name", NAME_TOO_LONG)
    else patch.name = name
  }
  if (input.role !== undefined) {
    if (isRole(input.role)) patch.role = input.role
    else problems.add("role", "must be owner, admin, member or viewer")
  }
  if (input.status !== undefined) {
    if (isStatus(input.status)) patch.status = input.status
    else problems.add("status", "must be active or inactive")
  }
  return patch
}

/** The part of `patch` that differs from `current`, so that repeating a change changes nothing. */
const changedFields = (current: PortalUser, patch: UserPatch): UserPatch =>
  Object.fromEntries(
    Object.entries(patch).filter(([field, value]) => current[field as keyof UserPatch] !== value)
  ) as UserPatch

/** The only unique index a write can break is the per-tenant e-mail one: ids are random UUIDs. */
const emailTaken = (error: SqlError): Effect.Effect<never, SqlError | ValidationFailed> =>
  isUniqueViolation(error)
    ? Effect.fail(new ValidationFailed({ message: "validation failed", fields: { email: ["is already taken"] } }))
    : Effect.fail(error)

/**
 * Portal users of a tenant (management API). Passwords are stored as argon2id hashes; hash and
 * second-factor secret never leave this service. Ending a user's sessions deletes them.
 */
export class PortalUsers extends Effect.Service<PortalUsers>()("parley/PortalUsers", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* AuditLog
    const parents = yield* ParentRows

    const findUser = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: TenantId, id: Schema.String, lock: Schema.Boolean }),
      Result: PortalUser,
      execute: ({ id, lock, tenantId }) =>
        sql`SELECT ${sql.literal(USER_COLUMNS)} FROM portal_users
            WHERE tenant_id = ${tenantId} AND id = ${id} ${sql.literal(lock ? "FOR UPDATE" : "")}`
    })

    const listUsers = SqlSchema.findAll({
      Request: TenantId,
      Result: PortalUser,
      execute: (tenantId) =>
        sql`SELECT ${sql.literal(USER_COLUMNS)} FROM portal_users
            WHERE tenant_id = ${tenantId} ORDER BY inserted_at DESC, id DESC LIMIT ${LOOKUP_LIMIT}`
    })

    const insertUser = SqlSchema.single({
      Request: Schema.Struct({
        id: Schema.String,
        tenantId: TenantId,
        email: Schema.String,
        name: Schema.NullOr(Schema.String),
        role: UserRole,
        status: UserStatus,
        passwordHash: Schema.String
      }),
      Result: PortalUser,
      execute: (r) =>
        sql`
          INSERT INTO portal_users (id, tenant_id, email, name, role, status, password_hash)
          VALUES (${r.id}, ${r.tenantId}, ${r.email}, ${r.name}, ${r.role}, ${r.status}, ${r.passwordHash})
          RETURNING ${sql.literal(USER_COLUMNS)}`
    })

    const load = (tenantId: TenantId, id: string, lock: boolean) =>
      findUser({ tenantId, id, lock }).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.fail(new NotFound({ message: `user ${id} not found` })),
          onSome: Effect.succeed
        }))
      )

    /**
     * Creates a user; the password must meet the policy and is stored only as its hash. `TenantGone`
     * when the tenant was deleted meanwhile.
     */
    const create = (tenantId: TenantId, input: UserInput, actor: Actor) =>
      Effect.gen(function*() {
        const problems = new Problems()
        const patch = validate(input, true, problems)
        const password = input.password ?? ""
        if (input.password === undefined) problems.add("password", "is required")
        else passwordViolations(password, input.email ?? "").forEach((v) => problems.add("password", v))
        yield* problems.check()
        // Outside the transaction: hashing takes tens of milliseconds and needs no row.
        // A failed hash is a broken node or a bug, not the request's fault: 500.
        const passwordHash = yield* Effect.orDie(hashPassword(password))
        const fields = {
          email: patch.email!, // validate requires it when creating
          name: patch.name ?? null,
          role: patch.role ?? "member",
          status: patch.status ?? "active"
        }
        return yield* Effect.gen(function*() {
          yield* parents.lockTenant(tenantId, actor)
          const user = yield* insertUser({ id: crypto.randomUUID(), tenantId, ...fields, passwordHash })
          yield* audit.record(actor, {
            tenantId,
            action: "user.created",
            resourceType: "user",
            resourceId: user.id,
            changes: fields
          })
          return user
        }).pipe(inTransaction(sql), Effect.catchTag("SqlError", emailTaken))
      }).pipe(orUnavailable)

    const list = (tenantId: TenantId) => listUsers(tenantId).pipe(orUnavailable)

    const get = (tenantId: TenantId, id: string) => load(tenantId, id, false).pipe(orUnavailable)

    /**
     * Sets the sent fields (PUT and PATCH alike): 404, then 412, then 422 (RFC 9110). Turning a user
     * `inactive` ends its sessions in the same transaction.
     */
    const update = (tenantId: TenantId, id: string, input: UserChange, ifMatch: Option.Option<string>, actor: Actor) =>
      Effect.gen(function*() {
        const current = yield* load(tenantId, id, true)
        yield* checkIfMatch(ifMatch, etagOf(current))
        // Pure, so it may run under the row lock.
        const problems = new Problems()
        const patch = validate(input, false, problems)
        yield* problems.check()
        const changes = changedFields(current, patch)
        if (Object.keys(changes).length === 0) return current
        yield* sql`UPDATE portal_users SET ${sql.update(changes)}, updated_at = now() WHERE id = ${id}`
        if (changes.status === "inactive") yield* sql`DELETE FROM portal_sessions WHERE user_id = ${id}`
        yield* audit.record(actor, { tenantId, action: "user.updated", resourceType: "user", resourceId: id, changes })
        return yield* load(tenantId, id, false)
      }).pipe(inTransaction(sql), Effect.catchTag("SqlError", emailTaken), orUnavailable)

    /** Deletes the user after the `If-Match` check; its sessions go with it (foreign key cascade). */
    const remove = (tenantId: TenantId, id: string, ifMatch: Option.Option<string>, actor: Actor) =>
      Effect.gen(function*() {
        const current = yield* load(tenantId, id, true)
        yield* checkIfMatch(ifMatch, etagOf(current))
        yield* sql`DELETE FROM portal_users WHERE id = ${id}`
        yield* audit.record(actor, { tenantId, action: "user.deleted", resourceType: "user", resourceId: id })
      }).pipe(inTransaction(sql), orUnavailable)

    return { create, list, get, update, remove } as const
  }),
  dependencies: [AuditLog.Default, ParentRows.Default]
}) {}
