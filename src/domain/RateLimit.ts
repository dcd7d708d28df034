import { Schema } from "effect"

/** Every rate-limit bucket of client-api.md "Limits". */
export const Bucket = Schema.Literal(
  "activity_create",
  "upload",
  "inbound",
  "token_generate",
  "publishable_token_ip",
  "publishable_token",
  "token_create",
  "login_ip",
  "login_account",
  "password_reset_ip",
  "password_reset_account"
)
export type Bucket = typeof Bucket.Type

/** The buckets a tenant may override through its settings. */
export const OverridableBucket = Schema.Literal(
  "activity_create",
  "upload",
  "inbound",
  "token_generate",
  "publishable_token"
)
export type OverridableBucket = typeof OverridableBucket.Type

/** The buckets counted per client address (IPv6 by its /64), not per tenant or account. */
export const ipBuckets: ReadonlySet<Bucket> = new Set<Bucket>(["publishable_token_ip", "token_create", "login_ip", "password_reset_ip"])

/**
 * The longest window: a year. Windows are aligned to wall-clock time and their bounds stored as
 * milliseconds, so longer ones would only overflow the counters' columns and the `retry-after` header.
 */
const MAX_SCALE_MS = 365 * 86_400_000

/** One fixed window: `limit` events per `scale_ms` milliseconds. */
export class Window extends Schema.Class<Window>("Window")({
  limit: Schema.Int.pipe(Schema.between(1, Number.MAX_SAFE_INTEGER)),
  scale_ms: Schema.Int.pipe(Schema.between(1, MAX_SCALE_MS))
}) {}

const windowsOf = <const K extends ReadonlyArray<string>>(keys: K) =>
  Schema.Struct(
    Object.fromEntries(keys.map((key) => [key, Schema.optional(Window)])) as {
      readonly [P in K[number]]: Schema.optional<typeof Window>
    }
  )

/** Installation-level overrides (`RATE_LIMITS`): any bucket. */
export const RateLimitTable = Schema.parseJson(windowsOf(Bucket.literals))

/** Tenant overrides: only the five overridable buckets. */
export const TenantLimits = windowsOf(OverridableBucket.literals)
export type TenantLimits = typeof TenantLimits.Type

/** Built-in defaults of client-api.md. */
export const defaultWindows: Record<Bucket, { readonly limit: number; readonly scale_ms: number }> = {
  activity_create: { limit: 100, scale_ms: 1000 },
  upload: { limit: 10, scale_ms: 1000 },
  inbound: { limit: 500, scale_ms: 1000 },
  token_generate: { limit: 10, scale_ms: 60000 },
  publishable_token_ip: { limit: 10, scale_ms: 60000 },
  publishable_token: { limit: 300, scale_ms: 60000 },
  token_create: { limit: 10, scale_ms: 60000 },
  login_ip: { limit: 5, scale_ms: 60000 },
  login_account: { limit: 5, scale_ms: 60000 },
  password_reset_ip: { limit: 5, scale_ms: 60000 },
  password_reset_account: { limit: 3, scale_ms: 3600000 }
}
