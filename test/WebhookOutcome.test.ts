import { describe, expect, it } from "@effect/vitest"
import {
  classifyResponse,
  parseRetryAfter,
  providerMessageId,
  type ReceivedResponse
} from "../src/delivery/WebhookOutcome.js"

const NOW = Date.parse("2026-11-29T12:00:00Z")
const text = (s: string) => new TextEncoder().encode(s)
const response = (status: number, extra: Partial<ReceivedResponse> = {}): ReceivedResponse => ({
  status,
  headers: {},
  body: new Uint8Array(),
  complete: true,
  ...extra
})
const tagOf = (status: number) => classifyResponse(response(status), NOW)._tag

describe("classifyResponse", () => {
  it("any 2xx is delivered", () => {
    for (const status of [200, 201, 202, 204, 299]) expect(tagOf(status)).toBe("Delivered")
  })

  it("408, 425, 429 and 5xx are retried", () => {
    for (const status of [408, 425, 429, 500, 502, 503, 504, 599]) expect(tagOf(status)).toBe("Retryable")
  })

  it("3xx (redirects are not followed) and the other 4xx are permanent", () => {
    for (const status of [300, 301, 302, 303, 307, 308, 400, 401, 403, 404, 409, 410, 413, 422, 451]) {
      expect(tagOf(status)).toBe("Permanent")
    }
  })

  it("a 429 carries its Retry-After, in seconds or as an HTTP date", () => {
    expect(classifyResponse(response(429, { headers: { "retry-after": "7" } }), NOW)).toEqual({
      _tag: "Retryable",
      error: "HTTP 429",
      status: 429,
      retryAfterMs: 7000
    })
    const at = new Date(NOW + 90_000).toUTCString()
    const outcome = classifyResponse(response(429, { headers: { "retry-after": at } }), NOW)
    expect(outcome._tag === "Retryable" && outcome.retryAfterMs).toBe(90_000)
    const bare = classifyResponse(response(429), NOW)
    expect(bare._tag === "Retryable" && bare.retryAfterMs).toBeNull()
  })

  it("a 503's Retry-After is not taken (only 429 is honoured)", () => {
    const outcome = classifyResponse(response(503, { headers: { "retry-after": "7" } }), NOW)
    expect(outcome._tag === "Retryable" && outcome.retryAfterMs).toBeNull()
  })

  it("a 2xx names the provider's message id when the receiver returns one", () => {
    const outcome = classifyResponse(response(200, { body: text(`{"id":"msg_1"}`) }), NOW)
    expect(outcome).toEqual({ _tag: "Delivered", status: 200, providerMessageId: "msg_1" })
  })
})

describe("parseRetryAfter", () => {
  it("reads delay-seconds and HTTP dates; a past date is now", () => {
    expect(parseRetryAfter("0", NOW)).toBe(0)
    expect(parseRetryAfter(" 120 ", NOW)).toBe(120_000)
    expect(parseRetryAfter("Sun, 29 Nov 2026 12:00:30 GMT", NOW)).toBe(30_000)
    expect(parseRetryAfter("Sun, 29 Nov 2026 11:00:00 GMT", NOW)).toBe(0)
  })

  it("absent, negative, fractional, garbage and overlong values are null", () => {
    for (const value of [undefined, "", "-5", "1.5", "soon", "9".repeat(20), "a".repeat(10_000)]) {
      expect(parseRetryAfter(value, NOW)).toBeNull()
    }
  })
})

describe("providerMessageId", () => {
  it("takes a JSON object's message_id, then id, then the x-message-id header", () => {
    expect(providerMessageId({}, text(`{"message_id":"a","id":"b"}`), true)).toBe("a")
    expect(providerMessageId({}, text(`{"id":42}`), true)).toBe("42")
    expect(providerMessageId({ "x-message-id": "h-1" }, text(`not json`), true)).toBe("h-1")
    expect(providerMessageId({ "x-message-id": "h-1" }, text(`{"ok":true}`), true)).toBe("h-1")
  })

  it("ignores a cut body, arrays, empty, non-scalar and overlong ids", () => {
    expect(providerMessageId({}, text(`{"id":"cut"}`), false)).toBeNull()
    expect(providerMessageId({}, text(`["id"]`), true)).toBeNull()
    expect(providerMessageId({}, text(`{"id":""}`), true)).toBeNull()
    expect(providerMessageId({}, text(`{"id":{"x":1}}`), true)).toBeNull()
    expect(providerMessageId({}, text(JSON.stringify({ id: "x".repeat(256) })), true)).toBeNull()
    expect(providerMessageId({}, new Uint8Array(), true)).toBeNull()
  })
})
