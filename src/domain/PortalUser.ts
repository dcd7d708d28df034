import { Schema } from "effect"
import { TenantId } from "./Tenant.js"

export const UserRole = Schema.Literal("owner", "admin", "member", "viewer")
export type UserRole = typeof UserRole.Type
export const UserStatus = Schema.Literal("active", "inactive")
export type UserStatus = typeof UserStatus.Type

/** A portal user as the management API shows it; the password hash and TOTP secret never. */
export class PortalUser extends Schema.Class<PortalUser>("PortalUser")({
  id: Schema.UUID,
  tenant_id: TenantId,
  email: Schema.String,
  name: Schema.NullOr(Schema.String),
  role: UserRole,
  status: UserStatus,
  totp_enabled: Schema.Boolean,
  inserted_at: Schema.String,
  updated_at: Schema.String
}) {}

/**
 * What a client may send for a user; checked by `PortalUsers` (422 per field). `password` is read
 * on create only; `role` and `status` are plain strings so a wrong value is a 422, not a 400.
 */
export const UserInput = Schema.Struct({
  email: Schema.optional(Schema.String),
  name: Schema.optional(Schema.NullOr(Schema.String)),
  password: Schema.optional(Schema.String),
  role: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String)
})
export type UserInput = typeof UserInput.Type

/**
 * What a client may send to change a user: `password` is not a field here, so it is dropped like any
 * unknown field, whatever its JSON type (server-apis.md: `password` ignored on PUT and PATCH).
 */
export const UserChange = UserInput.omit("password")
export type UserChange = typeof UserChange.Type
