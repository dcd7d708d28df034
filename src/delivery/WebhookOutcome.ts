/** How one delivery attempt ended, as the delivery loop records it. */
export type DeliveryOutcome =
  /** `status` is the HTTP status; null where the transport has none (NATS). */
  | { readonly _tag: "Delivered"; readonly status: number | null; readonly providerMessageId: string | null }
  | {
    readonly _tag: "Retryable"
    readonly error: string
    readonly status: number | null
    /** The receiver's `Retry-After`, in ms from now, when it sent one that parses. */
    readonly retryAfterMs: number | null
  }
  | { readonly _tag: "Permanent"; readonly error: string; readonly status: number | null }

export const delivered = (status: number | null, providerMessageId: string | null): DeliveryOutcome => ({
  _tag: "Delivered",
  status,
  providerMessageId
})
export const retryable = (error: string, status: number | null = null, retryAfterMs: number | null = null): DeliveryOutcome => ({
  _tag: "Retryable",
  error,
  status,
  retryAfterMs
})
export const permanent = (error: string, status: number | null = null): DeliveryOutcome => ({
  _tag: "Permanent",
  error,
  status
})

/** A response's headers as node and undici give them (lower-case names). */
export type ResponseHeaders = Readonly<Record<string, string | ReadonlyArray<string> | undefined>>

const headerValue = (headers: ResponseHeaders, name: string): string | undefined => {
  const value = headers[name]
  return typeof value === "string" ? value : value?.[0]
}

const SECONDS = /^\d{1,9}$/
/** IMF-fixdate, the form RFC 9110 has senders use (`Sun, 06 Nov 1994 08:49:37 GMT`); linear to match. */
const HTTP_DATE = /^[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT$/

/**
 * `Retry-After` in ms from `nowMs`: delay-seconds or an HTTP date (a date in the past is 0);
 * absent or unreadable is null.
 */
export const parseRetryAfter = (value: string | undefined, nowMs: number): number | null => {
  if (value === undefined) return null
  const text = value.trim()
  if (SECONDS.test(text)) return Number(text) * 1000
  // Date.parse alone is lenient ("-5" and "1.5" are years to it): only a real HTTP date gets there.
  if (!HTTP_DATE.test(text)) return null
  const at = Date.parse(text)
  return Number.isFinite(at) ? Math.max(0, at - nowMs) : null
}

const MAX_MESSAGE_ID_LENGTH = 255

const asMessageId = (value: unknown): string | null => {
  if (typeof value === "number" && Number.isFinite(value)) return String(value)
  if (typeof value === "string" && value.length > 0 && value.length <= MAX_MESSAGE_ID_LENGTH) return value
  return null
}

/**
 * The receiver's id for what it stored: a JSON object body's `message_id`, else its `id`, else an
 * `x-message-id` header. A body cut at `max_response_bytes` is not parsed.
 */
export const providerMessageId = (headers: ResponseHeaders, body: Uint8Array, complete: boolean): string | null => {
  if (complete && body.length > 0) {
    try {
      const parsed: unknown = JSON.parse(new TextDecoder().decode(body))
      if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) {
        const record = parsed as Record<string, unknown>
        const id = asMessageId(record["message_id"]) ?? asMessageId(record["id"])
        if (id !== null) return id
      }
    } catch {
      // Not JSON: a receiver owes us no body; the header may still name the message.
    }
  }
  return asMessageId(headerValue(headers, "x-message-id"))
}

/** A received response (`body` read up to `max_response_bytes`; `complete` when all of it was read). */
export interface ReceivedResponse {
  readonly status: number
  readonly headers: ResponseHeaders
  readonly body: Uint8Array
  readonly complete: boolean
}

/**
 * server-apis.md "Outbound webhook channel deliveries": 2xx success; 429 retried after its
 * `Retry-After`; 408, 425 and 5xx retried; 3xx (redirects are not followed), other 4xx and anything
 * else permanent.
 */
export const classifyResponse = (response: ReceivedResponse, nowMs: number): DeliveryOutcome => {
  const { status } = response
  if (status >= 200 && status < 300) {
    return delivered(status, providerMessageId(response.headers, response.body, response.complete))
  }
  if (status === 429) {
    return retryable("HTTP 429", status, parseRetryAfter(headerValue(response.headers, "retry-after"), nowMs))
  }
  if (status === 408 || status === 425 || (status >= 500 && status < 600)) return retryable(`HTTP ${status}`, status)
  if (status >= 300 && status < 400) return permanent(`HTTP ${status} (redirects are not followed)`, status)
  return permanent(`HTTP ${status}`, status)
}
