import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Option } from "effect"
import type { CorsOrigins } from "../config/AppConfig.js"
import { normalizeOrigin } from "../domain/PublishableKey.js"

// The router matches paths whatever their case, so this does too.
const CLIENT_API_PATH = /^\/api\/v1\/chat(?:[/?]|$)/i

/** Chromium's cap on `Access-Control-Max-Age`: a longer one is cut to this anyway. */
const PREFLIGHT_MAX_AGE_SECONDS = "7200"

/** Whether a request URL is under the client API, the only API browsers call from other origins. */
export const isClientApiUrl = (url: string) => CLIENT_API_PATH.test(url)

/** Whether a request is a CORS preflight: `OPTIONS` naming the method of the request to come. */
export const isPreflight = (request: HttpServerRequest.HttpServerRequest) =>
  request.method === "OPTIONS" && request.headers["access-control-request-method"] !== undefined

/** `Access-Control-Allow-Origin` for a request from `origin`; none when that origin is not allowed. */
const allowedOrigin = (allowed: CorsOrigins, origin: string | undefined): string | undefined =>
  allowed === "*"
    ? "*"
    : Option.getOrUndefined(
      Option.filter(origin === undefined ? Option.none() : normalizeOrigin(origin), (o) => allowed.has(o))
    )

/** An answer that depends on `Origin` must say so, or a shared cache hands it to another origin. */
const varyOn = (allowed: CorsOrigins): Record<string, string> => allowed === "*" ? {} : { vary: "Origin" }

/**
 * The 204 answer to a preflight: the methods the path takes (none for an unknown path, whose answer
 * is then a readable 404), `Authorization` and `Content-Type` only (client-api.md keeps
 * `x-idempotency-key` out). An origin not allowed gets a 204 without CORS headers, which the
 * browser refuses like a 403 without this node telling which origins it allows.
 */
export const preflightAnswer = (
  allowed: CorsOrigins,
  origin: string | undefined,
  methods: ReadonlyArray<string>
): HttpServerResponse.HttpServerResponse => {
  const allowOrigin = allowedOrigin(allowed, origin)
  return HttpServerResponse.empty({
    status: 204,
    headers: allowOrigin === undefined ? varyOn(allowed) : {
      ...varyOn(allowed),
      "access-control-allow-origin": allowOrigin,
      ...(methods.length > 0 ? { "access-control-allow-methods": methods.join(", ") } : {}),
      "access-control-allow-headers": "Authorization, Content-Type",
      "access-control-max-age": PREFLIGHT_MAX_AGE_SECONDS
    }
  })
}

/**
 * `response` with the CORS headers of an actual request, error answers included. `Retry-After` is
 * not exposed: clients read `details.retry_after_ms` (client-api.md "Authentication" 7). Never
 * `Access-Control-Allow-Credentials`: tokens travel in `Authorization`, not cookies.
 */
export const withCorsHeaders = (
  response: HttpServerResponse.HttpServerResponse,
  allowed: CorsOrigins,
  origin: string | undefined
): HttpServerResponse.HttpServerResponse => {
  const allowOrigin = allowedOrigin(allowed, origin)
  return HttpServerResponse.setHeaders(
    response,
    allowOrigin === undefined ? varyOn(allowed) : {
      ...varyOn(allowed),
      "access-control-allow-origin": allowOrigin,
      "access-control-expose-headers": "x-request-id"
    }
  )
}
