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
 * The 204 answer to a preflight: the path's methods, `Authorization` and `Content-Type` only. A disallowed
 * origin gets no CORS headers, which the browser refuses without learning which origins are allowed.
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
 * `response` with an actual request's CORS headers, errors included. `Retry-After` is not exposed (clients
 * read `details.retry_after_ms`), and never credentials: tokens travel in `Authorization`.
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
