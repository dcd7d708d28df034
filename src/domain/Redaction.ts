/** The placeholder shown instead of a secret value. */
export const REDACTED = "[REDACTED]"

const SENSITIVE = /^(authorization|api_?key|password|secret|token|access_token|app_secret|client_secret)$|(_token|_secret|_password|_api_key)$/i

/** True for object keys that name a credential (`api_key`, `password`, `*_token`, …). */
export const isSensitiveKey = (key: string): boolean => SENSITIVE.test(key)

/** A deep copy of a JSON value with every sensitive key's value replaced by `[REDACTED]`. */
export const redactSensitive = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(redactSensitive)
  if (typeof value !== "object" || value === null) return value
  return Object.fromEntries(
    Object.entries(value).map(([key, inner]) => [key, isSensitiveKey(key) ? REDACTED : redactSensitive(inner)])
  )
}
