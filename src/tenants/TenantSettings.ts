import { Effect, Either, Schema } from "effect"
import { AddressGuard } from "../delivery/AddressGuard.js"
import type { Problems } from "../domain/Problems.js"
import { TenantLimits } from "../domain/RateLimit.js"
import { MAX_RETENTION_DAYS, MIN_RETENTION_DAYS, type SettingsInput } from "../domain/Tenant.js"

/** Column values of a validated settings change; only the keys that were sent. */
export interface SettingsPatch {
  retention_days?: number
  alert_webhook_url?: string | null
  allowed_upload_types?: ReadonlyArray<string> | null
  /** Stored as jsonb: the driver sends an object as its JSON text. */
  limits?: typeof TenantLimits.Type
}

const mimeType = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/
const decodeLimits = Schema.decodeUnknownEither(TenantLimits, { onExcessProperty: "error" })

/** Checks the settings a tenant may manage, adding problems per field; returns the columns to set. */
export const validateSettings = (input: SettingsInput, problems: Problems) =>
  Effect.gen(function*() {
    const guard = yield* AddressGuard
    const patch: SettingsPatch = {}
    if (input.retention_days !== undefined) {
      const days = input.retention_days
      if (!Number.isInteger(days) || days < MIN_RETENTION_DAYS || days > MAX_RETENTION_DAYS) {
        problems.add("retention_days", `must be an integer from ${MIN_RETENTION_DAYS} to ${MAX_RETENTION_DAYS}`)
      } else patch.retention_days = days
    }
    if (input.alert_webhook_url !== undefined) {
      const url = input.alert_webhook_url
      if (url === null) patch.alert_webhook_url = null
      else {
        const checked = yield* Effect.either(guard.check(url))
        if (Either.isLeft(checked)) problems.add("alert_webhook_url", checked.left.reason)
        else patch.alert_webhook_url = url
      }
    }
    if (input.allowed_upload_types !== undefined) {
      const types = input.allowed_upload_types
      if (types === null) patch.allowed_upload_types = null
      else if (types.some((t) => !mimeType.test(t.toLowerCase()))) {
        problems.add("allowed_upload_types", "must be a list of MIME types such as image/png")
      } else patch.allowed_upload_types = [...new Set(types.map((t) => t.toLowerCase()))]
    }
    if (input.limits !== undefined) {
      const limits = decodeLimits(input.limits)
      if (Either.isLeft(limits)) {
        problems.add(
          "limits",
          "must map activity_create, upload, inbound, token_generate or publishable_token to {limit, scale_ms}, " +
            "both integers above 0, scale_ms at most 31536000000 (a year)"
        )
      } else patch.limits = limits.right
    }
    return patch
  })
