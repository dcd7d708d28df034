import { Effect, Either, Predicate } from "effect"
import { AddressGuard } from "../delivery/AddressGuard.js"
import type { ChannelType, JsonObject } from "../domain/Channel.js"
import type { Report } from "../domain/Problems.js"

/** A config checked against its type: what to store, and the URLs the address guard must pass. */
export interface CheckedConfig {
  readonly config: JsonObject
  readonly guarded: ReadonlyArray<{ readonly path: string; readonly url: string }>
}

/** Largest config accepted, as UTF-8 JSON. */
const MAX_CONFIG_BYTES = 65_536

/** Webhook defaults and bounds of server-apis.md ("webhook channel config"). */
const WEBHOOK_LIMITS = {
  connect_timeout: { min: 1, max: 30_000, default: 5_000 },
  receive_timeout: { min: 1, max: 60_000 },
  max_response_bytes: { min: 1, max: 10_485_760, default: 1_048_576 }
} as const

const WEBHOOK_METHODS: ReadonlyArray<string> = ["POST", "PUT", "PATCH"]
const MAX_HEADERS = 50
const MAX_URL_LENGTH = 2048

// The signer and the HTTP client own these; a tenant header must not override or smuggle them.
const RESERVED_HEADERS = new Set([
  "host",
  "content-length",
  "content-type",
  "connection",
  "expect",
  "keep-alive",
  "proxy-authenticate",
  "proxy-authorization",
  "proxy-connection",
  "te",
  "trailer",
  "trailers",
  "transfer-encoding",
  "upgrade"
])

/** A header name the sender owns: a tenant's `headers` entry with it is refused at save and skipped at send. */
export const isReservedHeader = (name: string): boolean => {
  const lower = name.toLowerCase()
  return RESERVED_HEADERS.has(lower) || lower.startsWith("x-chat-")
}
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/
const HEADER_VALUE = /^[^\r\n\0]*$/

const free = (config: JsonObject): CheckedConfig => ({ config, guarded: [] })

/** An integer setting within bounds; absent takes `fallback` (left out when there is none). */
const integerSetting = (
  out: Record<string, unknown>,
  key: string,
  bounds: { readonly min: number; readonly max: number; readonly default?: number },
  report: Report
) => {
  const value = out[key]
  if (value === undefined) {
    if (bounds.default !== undefined) out[key] = bounds.default
  } else if (typeof value !== "number" || !Number.isInteger(value) || value < bounds.min || value > bounds.max) {
    report(key, `must be an integer from ${bounds.min} to ${bounds.max}`)
  }
}

const checkHeaders = (headers: unknown, report: Report) => {
  if (!Predicate.isRecord(headers)) return report("headers", "must be an object of header names to string values")
  const entries = Object.entries(headers)
  if (entries.length > MAX_HEADERS) report("headers", `must have at most ${MAX_HEADERS} headers`)
  const seen = new Set<string>()
  for (const [name, value] of entries) {
    const lower = name.toLowerCase()
    const path = `headers.${name}`
    if (!HEADER_NAME.test(name)) report(path, "is not a valid header name")
    else if (isReservedHeader(lower)) report(path, "is reserved")
    else if (seen.has(lower)) report(path, "is given twice (header names are case-insensitive)")
    if (typeof value !== "string") report(path, "must be a string")
    else if (!HEADER_VALUE.test(value)) report(path, "must not contain line breaks")
    seen.add(lower)
  }
}

const webhook = (config: JsonObject, report: Report): CheckedConfig => {
  const out: Record<string, unknown> = { ...config }
  const guarded: Array<CheckedConfig["guarded"][number]> = []
  const url = config["url"]
  if (url === undefined || url === null || url === "") report("url", "is required")
  else if (typeof url !== "string") report("url", "must be a string")
  else if (url.length > MAX_URL_LENGTH) report("url", `must be at most ${MAX_URL_LENGTH} characters`)
  else guarded.push({ path: "url", url })
  const method = config["method"] ?? "POST"
  if (typeof method !== "string" || !WEBHOOK_METHODS.includes(method.toUpperCase())) {
    report("method", "must be POST, PUT or PATCH")
  } else out["method"] = method.toUpperCase()
  if (config["headers"] === undefined) out["headers"] = {}
  else checkHeaders(config["headers"], report)
  integerSetting(out, "connect_timeout", WEBHOOK_LIMITS.connect_timeout, report)
  // No default: when unset, the channel's retry_policy.timeout_ms applies.
  integerSetting(out, "receive_timeout", WEBHOOK_LIMITS.receive_timeout, report)
  integerSetting(out, "max_response_bytes", WEBHOOK_LIMITS.max_response_bytes, report)
  return { config: out, guarded }
}

const isHttpUrl = (text: string) => {
  if (!URL.canParse(text)) return false
  const url = new URL(text)
  return (url.protocol === "http:" || url.protocol === "https:") && url.hostname !== "" &&
    url.username === "" && url.password === ""
}

const META_STRINGS = ["access_token", "verify_token", "app_secret", "phone_number_id", "business_account_id"] as const

const metaMessaging = (config: JsonObject, requireSignature: boolean, report: Report): CheckedConfig => {
  for (const key of META_STRINGS) {
    if (config[key] !== undefined && typeof config[key] !== "string") report(key, "must be a string")
  }
  const base = config["api_base_url"]
  const baseIsUrl = typeof base === "string" && isHttpUrl(base)
  if (base !== undefined && !baseIsUrl) report("api_base_url", "must be an http or https URL")
  // Its inbound requests are signed with app_secret: without it every signed request would fail.
  if (requireSignature && (config["app_secret"] === undefined || config["app_secret"] === "")) {
    report("app_secret", "is required when require_signature is true")
  }
  // The provider's API is called at this address, so it passes the address guard like a webhook's.
  return { config, guarded: baseIsUrl ? [{ path: "api_base_url", url: base }] : [] }
}

const NATS_SUBJECT = /^[^\s.*>]+(\.[^\s.*>]+)*$/

const nats = (config: JsonObject, report: Report): CheckedConfig => {
  const url = config["url"]
  if (url === undefined) report("url", "is required")
  else if (typeof url !== "string" || !URL.canParse(url) || !["nats:", "tls:"].includes(new URL(url).protocol)) {
    report("url", "must be a nats:// or tls:// URL")
  }
  const subject = config["subject"]
  if (subject === undefined) report("subject", "is required")
  else if (typeof subject !== "string" || !NATS_SUBJECT.test(subject)) {
    report("subject", "must be a NATS subject such as chat.activities, without wildcards")
  }
  return free(config)
}

/**
 * Checks a config against its channel type without IO: typed settings validated (unknown keys kept),
 * webhook defaults filled in; other types accept any object.
 */
const checkConfig = (
  type: ChannelType,
  config: JsonObject,
  requireSignature: boolean,
  report: Report
): CheckedConfig => {
  if (new TextEncoder().encode(JSON.stringify(config)).length > MAX_CONFIG_BYTES) {
    report("", `must be at most ${MAX_CONFIG_BYTES} bytes as JSON`)
    return free(config)
  }
  switch (type) {
    case "webhook":
      return webhook(config, report)
    case "meta_messaging":
      return metaMessaging(config, requireSignature, report)
    case "nats":
      return nats(config, report)
    case "echo":
    case "websocket":
    case "http_pull":
    case "email":
      return free(config)
  }
}

/** `checkConfig`, then the address guard on every outbound URL (non-public targets are refused). */
export const validateConfig = (type: ChannelType, config: JsonObject, requireSignature: boolean, report: Report) =>
  Effect.gen(function*() {
    const guard = yield* AddressGuard
    const checked = checkConfig(type, config, requireSignature, report)
    for (const { path, url } of checked.guarded) {
      const result = yield* Effect.either(guard.check(url))
      if (Either.isLeft(result)) report(path, result.left.reason)
    }
    return checked.config
  })
