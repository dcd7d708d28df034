import { Predicate } from "effect"
import { fieldPath, type Report } from "./Problems.js"

/** What a credential-like value is shown as. */
export const REDACTED = "[REDACTED]"

/**
 * The longest key judged whole. A longer key is judged on its first and last halves of this, as if a
 * separator stood between them: its `*_token`-like suffix and its leading words count, its middle not.
 */
export const KEY_EXAMINED_CHARS = 256
const KEY_END_CHARS = KEY_EXAMINED_CHARS / 2

// Every delivery payload is redacted, and its keys are mostly the same few: remember them, within
// a count and a size (characters of keys and names) that hostile keys cannot push past.
const NORMALIZED_CACHE_ENTRIES = 10_000
const NORMALIZED_CACHE_CHARS = 1_000_000
const normalizedKeys = new Map<string, string>()
let normalizedKeysChars = 0

const isUpper = (code: number) => code >= 65 && code <= 90
const isLower = (code: number) => code >= 97 && code <= 122
const isLowerOrDigit = (code: number) => isLower(code) || (code >= 48 && code <= 57)

/**
 * The name in one pass: words split at case changes (`APIToken` is `api_token`), lower-cased, every run
 * of other characters one `_` (`toLowerCase` turns `İ` and `K` into ASCII).
 */
const nameOf = (key: string): string => {
  let name = ""
  let separated = false
  const separate = () => {
    if (!separated) name += "_"
    separated = true
  }
  for (let i = 0; i < key.length; i++) {
    const code = key.charCodeAt(i)
    if (isUpper(code)) {
      const before = key.charCodeAt(i - 1)
      if (isLowerOrDigit(before) || (isUpper(before) && isLower(key.charCodeAt(i + 1)))) separate()
      name += String.fromCharCode(code + 32)
      separated = false
    } else if (isLowerOrDigit(code)) {
      name += key[i]
      separated = false
    } else if (code < 128) separate()
    else {
      for (const char of key[i]!.toLowerCase()) {
        if (isLowerOrDigit(char.charCodeAt(0))) {
          name += char
          separated = false
        } else separate()
      }
    }
  }
  return name
}

/**
 * `accessToken`, `APIToken`, `X-Api-Key` and `api key` become `access_token`, `api_token`,
 * `x_api_key`, `api_key` (`X-Apikey`: `x_apikey`); a key over `KEY_EXAMINED_CHARS` is cut first.
 */
export const normalizeKey = (key: string): string => {
  const examined = key.length > KEY_EXAMINED_CHARS ? `${key.slice(0, KEY_END_CHARS)} ${key.slice(-KEY_END_CHARS)}` : key
  const known = normalizedKeys.get(examined)
  if (known !== undefined) return known
  const name = nameOf(examined)
  const chars = examined.length + name.length
  if (normalizedKeys.size >= NORMALIZED_CACHE_ENTRIES || normalizedKeysChars + chars > NORMALIZED_CACHE_CHARS) {
    normalizedKeys.clear()
    normalizedKeysChars = 0
  }
  normalizedKeys.set(examined, name)
  normalizedKeysChars += chars
  return name
}

const sensitiveNames = new Set(["authorization", "api_key", "apikey", "password", "secret", "token"])
const sensitiveSuffixes = ["_token", "_secret", "_password", "_key", "_apikey"]

/** True for a key that looks like it holds a credential (`authorization`, `api_key`, `*_token`, …). */
export const isSensitiveKey = (key: string): boolean => {
  const name = normalizeKey(key)
  return sensitiveNames.has(name) || sensitiveSuffixes.some((suffix) => name.endsWith(suffix))
}

/** True for a header name that carries credentials: the key rule, plus any `*auth*` header and cookies. */
export const isSensitiveHeader = (name: string): boolean => {
  const normalized = normalizeKey(name)
  return isSensitiveKey(name) || normalized.includes("auth") || normalized === "cookie" ||
    normalized === "set_cookie"
}

/** Whether the value under `key` of an object is hidden; `inHeaders` when the object is a header map. */
const hides = (key: string, inHeaders: boolean) => inHeaders ? isSensitiveHeader(key) : isSensitiveKey(key)

const AUTHORITY_ENDS = new Set(["/", "?", "#", "\\"])

/**
 * Calls `visit` with the start, `@` and first `:` (-1 when none) of every URL userinfo in `text`, in one
 * pass; as in WHATWG URLs, the authority ends at `/`, `?`, `#` or `\`, the userinfo at its last `@`.
 */
const forEachUserinfo = (text: string, visit: (start: number, at: number, colon: number) => void): void => {
  let marker = text.indexOf("://")
  while (marker !== -1) {
    const start = marker + 3
    let end = start
    let at = -1
    let colon = -1
    for (; end < text.length && !AUTHORITY_ENDS.has(text[end]!); end++) {
      if (text[end] === "@") at = end
      else if (text[end] === ":" && colon === -1) colon = end
    }
    if (at > start) visit(start, at, colon < at ? colon : -1)
    // The next `://` may begin at the authority's last character (`a://b://c@d`).
    marker = text.indexOf("://", end - 1)
  }
}

/**
 * `text` with the password of every URL in it replaced by `[REDACTED]` (`nats://user:[REDACTED]@host`),
 * or the whole userinfo when it has no password: a lone user part (`https://token@host`) is a credential too.
 */
const redactUrlCredentials = (text: string): string => {
  if (!text.includes("@")) return text
  let out = ""
  let copied = 0
  forEachUserinfo(text, (start, at, colon) => {
    const hidden = colon !== -1 && colon + 1 < at ? colon + 1 : start
    out += text.slice(copied, hidden) + REDACTED
    copied = at
  })
  return out + text.slice(copied)
}

const hasRedactedUrlCredential = (text: string): boolean => {
  let found = false
  forEachUserinfo(text, (start, at) => {
    found ||= text.slice(start, at).includes(REDACTED)
  })
  return found
}

/** `urls`: also the credentials inside URLs of string values. */
const redactValue = (value: unknown, inHeaders: boolean, urls: boolean): unknown => {
  if (typeof value === "string") return urls ? redactUrlCredentials(value) : value
  if (Array.isArray(value)) return value.map((item) => redactValue(item, false, urls))
  if (!Predicate.isRecord(value)) return value
  const out: Record<string, unknown> = {}
  for (const [key, inner] of Object.entries(value)) {
    // null reveals nothing and tells the reader the setting is empty.
    out[key] = hides(key, inHeaders) && inner !== null
      ? REDACTED
      : redactValue(inner, normalizeKey(key) === "headers", urls)
  }
  return out
}

/**
 * A copy with every credential-like value, authorization-like header value and URL credential inside a
 * string replaced by `[REDACTED]`, at any depth.
 */
export const redactObject = (value: Readonly<Record<string, unknown>>): Record<string, unknown> =>
  redactValue(value, false, true) as Record<string, unknown>

const NOTHING_STORED = "is [REDACTED] but no stored value exists"
const URL_CREDENTIAL_CHANGED = "holds a [REDACTED] URL credential but is not the stored URL: send the credential"

/**
 * A sent string with a redacted URL credential: the stored string when it is shown exactly so, else
 * reported. Grafting the stored credential onto another URL could send it to another host.
 */
const restoreString = (sent: string, stored: unknown, path: string, report: Report): string => {
  if (!sent.includes(REDACTED)) return sent
  if (typeof stored === "string" && redactUrlCredentials(stored) === sent) return stored
  if (hasRedactedUrlCredential(sent)) report(path, URL_CREDENTIAL_CHANGED)
  return sent
}

const restoreValue = (sent: unknown, stored: unknown, path: string, report: Report): unknown => {
  if (sent === REDACTED) {
    if (stored === undefined) report(path, NOTHING_STORED)
    return stored
  }
  if (typeof sent === "string") return restoreString(sent, stored, path, report)
  if (Array.isArray(sent)) {
    return sent.map((item, i) => restoreValue(item, Array.isArray(stored) ? stored[i] : undefined, fieldPath(path, i), report))
  }
  if (!Predicate.isRecord(sent)) return sent
  const out: Record<string, unknown> = {}
  for (const [key, inner] of Object.entries(sent)) {
    const previous = Predicate.isRecord(stored) && Object.hasOwn(stored, key) ? stored[key] : undefined
    out[key] = restoreValue(inner, previous, fieldPath(path, key), report)
  }
  return out
}

/**
 * The sent object with every `[REDACTED]` (or redacted URL credential) put back from the stored value at
 * the same path; one with nothing stored to put back is reported with its path.
 */
export const restoreRedacted = (
  sent: Readonly<Record<string, unknown>>,
  stored: Readonly<Record<string, unknown>>,
  report: Report
): Record<string, unknown> => restoreValue(sent, stored, "", report) as Record<string, unknown>

/** A copy of any JSON value with every credential-like value redacted (stored delivery payloads). */
export const redactSensitive = (value: unknown): unknown => redactValue(value, false, false)
