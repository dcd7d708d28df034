import { Schema } from "effect"
import { TenantLimits } from "./RateLimit.js"
import { LowerCaseUuid } from "./Uuid.js"

/** A tenant's id, lower-case whatever case it was sent in. */
export const TenantId = LowerCaseUuid("TenantId")
export type TenantId = typeof TenantId.Type

export const TenantStatus = Schema.Literal("active", "inactive")
export const TenantTier = Schema.Literal("high", "default", "bulk")

/** A tenant as the admin API and `GET /manage/settings` show it (key hashes never). */
export class Tenant extends Schema.Class<Tenant>("Tenant")({
  id: TenantId,
  name: Schema.String,
  status: TenantStatus,
  tier: TenantTier,
  retention_days: Schema.Int,
  alert_webhook_url: Schema.NullOr(Schema.String),
  allowed_upload_types: Schema.NullOr(Schema.Array(Schema.String)),
  limits: TenantLimits,
  inserted_at: Schema.String,
  updated_at: Schema.String
}) {}

/** Settings a tenant manages itself (`/manage/settings`); unknown keys are ignored. */
export const SettingsInput = Schema.Struct({
  retention_days: Schema.optional(Schema.Number),
  alert_webhook_url: Schema.optional(Schema.NullOr(Schema.String)),
  allowed_upload_types: Schema.optional(Schema.NullOr(Schema.Array(Schema.String))),
  // Checked as a whole (422) rather than by shape (400): invalid limits reject the request.
  limits: Schema.optional(Schema.Unknown)
})
export type SettingsInput = typeof SettingsInput.Type

/** Every field the admin API may set; all optional here, `name` is required on create. */
export const TenantInput = Schema.Struct({
  ...SettingsInput.fields,
  name: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  tier: Schema.optional(Schema.String)
})
export type TenantInput = typeof TenantInput.Type

/** The smallest `retention_days` a tenant may choose. */
export const MIN_RETENTION_DAYS = 1
export const MAX_RETENTION_DAYS = 36500
export const DEFAULT_RETENTION_DAYS = 90
