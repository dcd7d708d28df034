/** Rules every HTTP answer follows, shared by the edge middleware and the lean append route. */

/** Largest JSON body any API route reads; uploads set their own limit. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024

/** Accept excludes JSON when it names types and none of them can be JSON. */
export const acceptsJson = (accept: string | undefined) => {
  if (accept === undefined || accept.trim() === "") return true
  return accept.split(",").some((part) => {
    const [type, ...params] = part.trim().toLowerCase().split(";")
    const q = params.map((p) => p.trim()).find((p) => p.startsWith("q="))
    if (q !== undefined && Number(q.slice(2)) === 0) return false
    return type === "*/*" || type === "application/*" || type === "application/json" ||
      (type?.startsWith("application/") === true && type.endsWith("+json"))
  })
}

/**
 * Whether a body's content type is JSON: `application/json` with any parameters, or none. Anything else
 * (`application/json-patch+json`, a bare `; charset=utf-8`) HttpApi would read as bytes.
 */
export const isJsonContentType = (contentType: string | undefined) => {
  if (contentType === undefined || contentType.trim() === "") return true
  return contentType.split(";", 1)[0]!.trim().toLowerCase() === "application/json"
}

/** `Retry-After` of a 429 or 503: `details.retry_after_ms` in seconds, rounded up, at least 1. */
export const retryAfterSeconds = (retryAfterMs: unknown): string =>
  String(typeof retryAfterMs === "number" ? Math.max(1, Math.ceil(retryAfterMs / 1000)) : 1)

export const REQUEST_BODY_UNREADABLE = "the request body could not be read or parsed"
export const REQUEST_SHAPE_MISMATCH = "the request does not match the expected shape"
export const REQUEST_BODY_TOO_LARGE = "request body too large"

/** Whether a body read failed because the body is over the size limit set on the request. */
export const isBodyTooLarge = (error: { readonly cause?: unknown }) =>
  error.cause instanceof Error && error.cause.message === "maxBytes exceeded"

/** Deepest nesting of arrays and objects a JSON body may have (deeper ones could exhaust the stack). */
export const MAX_JSON_DEPTH = 100
export const REQUEST_BODY_TOO_DEEP = `the request body nests deeper than ${MAX_JSON_DEPTH} levels`

/** Whether JSON text nests arrays and objects deeper than `max`; read before anything parses it. */
export const nestsDeeperThan = (text: string, max: number): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (c === 92) i++ // backslash: skip the escaped character
      else if (c === 34) inString = false
    } else if (c === 34) inString = true
    else if (c === 91 || c === 123) {
      if (++depth > max) return true
    } else if (c === 93 || c === 125) depth--
  }
  return false
}
