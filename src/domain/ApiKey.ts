import { Schema } from "effect"
import { TenantId } from "./Tenant.js"

export const Scope = Schema.Literal("read", "write", "manage")
export type Scope = typeof Scope.Type
export const allScopes: ReadonlyArray<Scope> = ["read", "write", "manage"]

/** A scoped API key as the APIs show it; `key` only in the create response. */
export class ApiKey extends Schema.Class<ApiKey>("ApiKey")({
  id: Schema.UUID,
  tenant_id: TenantId,
  name: Schema.String,
  prefix: Schema.String,
  scopes: Schema.Array(Scope),
  expires_at: Schema.NullOr(Schema.String),
  last_used_at: Schema.NullOr(Schema.String),
  revoked_at: Schema.NullOr(Schema.String),
  created_by: Schema.NullOr(Schema.String),
  inserted_at: Schema.String,
  updated_at: Schema.String
}) {}

/** The key a request was authenticated with. */
export interface AuthenticatedKey {
  readonly id: string
  readonly tenantId: TenantId
  readonly kind: "primary" | "scoped"
  readonly scopes: ReadonlyArray<Scope>
}

/** What a client may send to issue a key; checked by `ApiKeys.issue` (422 per field). */
export const ApiKeyInput = Schema.Struct({
  name: Schema.optional(Schema.String),
  scopes: Schema.optional(Schema.Array(Schema.String)),
  expires_at: Schema.optional(Schema.NullOr(Schema.String))
})
export type ApiKeyInput = typeof ApiKeyInput.Type
