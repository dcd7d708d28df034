import { Predicate } from "effect"
import { fieldPath } from "./Problems.js"

/** What a credential-like value is shown as. */
export const REDACTED = "[REDACTED]"

const NORMALIZED_CACHE_SIZE = 10_000
// Every delivery payload is redacted, and its keys are mostly the same few: remember them.
const normalizedKeys = new Map<string, string>()

/**
 * `accessToken`, `APIToken`, `X-Api-Key` and `api key` become `access_token`, `api_token`,
 * `x_api_key`, `api_key` (`X-Apikey`: `x_apikey`).
 */
const normalize = (key: string): string => {
  const known = normalizedKeys.get(key)
  if (known !== undefined) return known
  const name = key
    .replace(/([A-Z]+)([A-Z][a-z])/g, "$1_$2")
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "_")
  if (normalizedKeys.size >= NORMALIZED_CACHE_SIZE) normalizedKeys.clear()
  normalizedKeys.set(key, name)
  return name
}

const sensitiveNames = new Set(["authorization", "api_key", "apikey", "password", "secret", "token"])
const sensitiveSuffixes = ["_token", "_secret", "_password", "_key", "_apikey"]

/** True for a key that looks like it holds a credential (`authorization`, `api_key`, `*_token`, …). */
export const isSensitiveKey = (key: string): boolean => {
  const name = normalize(key)
  return sensitiveNames.has(name) || sensitiveSuffixes.some((suffix) => name.endsWith(suffix))
}

/** True for a header name that carries credentials: the key rule, plus any `*auth*` header and cookies. */
export const isSensitiveHeader = (name: string): boolean => {
  const normalized = normalize(name)
  return isSensitiveKey(name) || normalized.includes("auth") || normalized === "cookie" ||
    normalized === "set_cookie"
}

/** Whether the value under `key` of an object is hidden; `inHeaders` when the object is a header map. */
const hides = (key: string, inHeaders: boolean) => inHeaders ? isSensitiveHeader(key) : isSensitiveKey(key)

const redactValue = (value: unknown, inHeaders: boolean): unknown => {
  if (Array.isArray(value)) return value.map((item) => redactValue(item, false))
  if (!Predicate.isRecord(value)) return value
  const out: Record<string, unknown> = {}
  for (const [key, inner] of Object.entries(value)) {
    // null reveals nothing and tells the reader the setting is empty.
    out[key] = hides(key, inHeaders) && inner !== null ? REDACTED : redactValue(inner, normalize(key) === "headers")
  }
  return out
}

/**
 * A copy of the object with every credential-like value replaced by `[REDACTED]`, at any depth and
 * inside arrays; every value of a `headers` map whose header name is authorization-like too.
 */
export const redactObject = (value: Readonly<Record<string, unknown>>): Record<string, unknown> =>
  redactValue(value, false) as Record<string, unknown>


const restoreValue = (sent: unknown, stored: unknown, path: string, missing: (path: string) => void): unknown => {
  if (sent === REDACTED) {
    if (stored === undefined) missing(path)
    return stored
  }
  if (Array.isArray(sent)) {
    return sent.map((item, i) => restoreValue(item, Array.isArray(stored) ? stored[i] : undefined, fieldPath(path, i), missing))
  }
  if (!Predicate.isRecord(sent)) return sent
  const out: Record<string, unknown> = {}
  for (const [key, inner] of Object.entries(sent)) {
    const previous = Predicate.isRecord(stored) && Object.hasOwn(stored, key) ? stored[key] : undefined
    out[key] = restoreValue(inner, previous, fieldPath(path, key), missing)
  }
  return out
}

/**
 * The sent object with every value still equal to `[REDACTED]`, at any depth, replaced by the stored
 * value at the same path (array items by index). A `[REDACTED]` with nothing stored at its path is
 * reported to `missing` with that path (`headers.authorization`, `accounts[0].password`).
 */
export const restoreRedacted = (
  sent: Readonly<Record<string, unknown>>,
  stored: Readonly<Record<string, unknown>>,
  missing: (path: string) => void
): Record<string, unknown> => restoreValue(sent, stored, "", missing) as Record<string, unknown>

/** A copy of any JSON value with every credential-like value redacted (stored delivery payloads). */
export const redactSensitive = (value: unknown): unknown => redactValue(value, false)
