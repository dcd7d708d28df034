import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Cause, Chunk, Effect, Option } from "effect"
import { Lifecycle } from "../ops/Lifecycle.js"
import { logsAtDebug } from "../ops/LogLevels.js"
import { Metrics } from "../ops/Metrics.js"
import {
  acceptsJson,
  isBodyTooLarge,
  isWireError,
  MAX_JSON_BODY_BYTES,
  REQUEST_BODY_TOO_LARGE,
  REQUEST_BODY_UNREADABLE,
  REQUEST_SHAPE_MISMATCH,
  retryAfterSeconds,
  statusOfWireError
} from "./EdgeRules.js"
import { DEPRECATION_HEADERS, logDeprecatedUse } from "./DeprecationsPage.js"
import { envelopeBody, envelopeResponse, toBody } from "./ErrorEnvelope.js"
import { answersOwnBody, refuseBody } from "./JsonBodyRules.js"
import { INVALID_CREATE_BODY, legacyRoutes } from "./LegacyRoutes.js"
import { RequestArrival, RequestId, requestIdFrom } from "./RequestId.js"
import { RouteTable } from "./RouteTable.js"

/**
 * 413 for a JSON body over the limit. The rest of the body is never read, so the connection
 * cannot carry another request: it is closed once this answer is written.
 */
const payloadTooLarge = (requestId: string) =>
  HttpServerResponse.setHeader(
    envelopeResponse(413, "payload_too_large", REQUEST_BODY_TOO_LARGE, { max_bytes: MAX_JSON_BODY_BYTES }, requestId),
    "connection",
    "close"
  )

/**
 * The deprecated create maps every bad body to 401 (server-apis.md), one over the limit too. It is
 * answered before the body is read, as the 413 is: answered late, after the server stopped
 * reading, the client may see its connection reset before it reads the answer.
 */
const legacyBodyTooLarge = (requestId: string) =>
  HttpServerResponse.setHeader(envelopeResponse(401, "unauthorized", INVALID_CREATE_BODY, null, requestId), "connection", "close")

/**
 * The response for a failure that escaped the routes: the envelope with the right status, or a
 * logged 500 `internal` that reveals nothing of the failure.
 */
const responseFromCause = (cause: Cause.Cause<unknown>, requestId: string, allowedMethods: ReadonlyArray<string>) => {
  // HttpApi turns an unreadable body into a defect (`orDie`), so defects are searched too.
  const failure = Chunk.head(Chunk.appendAll(Cause.failures(cause) as Chunk.Chunk<unknown>, Cause.defects(cause)))
  if (Option.isSome(failure)) {
    const error = failure.value
    if (error instanceof HttpServerError.RouteNotFound) {
      return Effect.succeed(
        allowedMethods.length > 0
          ? HttpServerResponse.setHeader(
            envelopeResponse(405, "method_not_allowed", "method not allowed on this route", null, requestId),
            "allow",
            allowedMethods.join(", ")
          )
          : envelopeResponse(404, "not_found", "no such route", null, requestId)
      )
    }
    if (error instanceof HttpServerError.RequestError) {
      return Effect.succeed(
        isBodyTooLarge(error)
          ? payloadTooLarge(requestId)
          : envelopeResponse(400, "bad_request", REQUEST_BODY_UNREADABLE, null, requestId)
      )
    }
    if (isWireError(error)) {
      return Effect.succeed(HttpServerResponse.unsafeJson(toBody(error, requestId), { status: statusOfWireError(error) }))
    }
  }
  return Effect.logError("request failed unexpectedly", cause).pipe(
    Effect.as(envelopeResponse(500, "internal", "internal error", null, requestId))
  )
}

const decoder = new TextDecoder()

/** Reads the JSON body of a response the routes built, if it has one. */
const jsonBodyOf = (response: HttpServerResponse.HttpServerResponse): unknown => {
  if (response.body._tag !== "Uint8Array") return undefined
  try {
    return JSON.parse(decoder.decode(response.body.body))
  } catch {
    return undefined
  }
}

/**
 * HttpApi writes schema decode failures itself, before any middleware sees them: rewrite that one
 * body into the `bad_request` envelope. Also gives 429 and 503 envelopes their `Retry-After`.
 */
const finishResponse = (response: HttpServerResponse.HttpServerResponse, requestId: string) => {
  if (response.status === 400) {
    const body = jsonBodyOf(response) as { _tag?: string; message?: string } | undefined
    if (body?._tag === "HttpApiDecodeError") {
      return HttpServerResponse.unsafeJson(
        envelopeBody("bad_request", REQUEST_SHAPE_MISMATCH, null, requestId),
        { status: 400, headers: response.headers }
      )
    }
  }
  if ((response.status === 429 || response.status === 503) && response.headers["retry-after"] === undefined) {
    const body = jsonBodyOf(response) as { error?: { details?: { retry_after_ms?: number } | null } } | undefined
    return HttpServerResponse.setHeader(response, "retry-after", retryAfterSeconds(body?.error?.details?.retry_after_ms))
  }
  return response
}

/** The deprecated surface a request uses, if any: a legacy route, or any route with a channel token. */
const deprecatedSurface = (request: HttpServerRequest.HttpServerRequest, template: string | undefined) =>
  legacyRoutes.some((route) => route.method === request.method && route.path === template)
    ? `${request.method} ${template}`
    : request.headers["x-channel-token"] !== undefined
    ? "x-channel-token"
    : undefined

/**
 * The edge of every HTTP request: request id, content negotiation, body limits, the error envelope
 * for everything that is not a success, deprecation marks, metrics and one access log line.
 */
export const EdgeMiddleware = HttpLayerRouter.middleware(
  Effect.gen(function*() {
    const metrics = yield* Metrics
    const routes = yield* RouteTable
    const lifecycle = yield* Lifecycle
    const accessLog = yield* logsAtDebug
    return (httpEffect) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const requestId = requestIdFrom(request.headers["x-request-id"])
        const started = performance.now()
        const template = routes.template(request.method, request.url)
        // The router matches paths whatever their case, so this does too.
        const isApi = /^\/api\//i.test(request.url)
        const deprecated = deprecatedSurface(request, template)

        const contentLength = Number(request.headers["content-length"] ?? "0")
        const early = isApi && !acceptsJson(request.headers["accept"])
          ? envelopeResponse(406, "not_acceptable", "this API answers JSON only", null, requestId)
          : template !== undefined && contentLength > MAX_JSON_BODY_BYTES && !template.endsWith("/upload")
          ? answersOwnBody(request.method, template) ? legacyBodyTooLarge(requestId) : payloadTooLarge(requestId)
          : template === undefined
          ? undefined
          : Option.getOrUndefined(Option.map(yield* refuseBody(request, template), (refusal) =>
            refusal._tag === "TooLarge"
              ? payloadTooLarge(requestId)
              : envelopeResponse(400, "bad_request", refusal.message, null, requestId)))

        // Arrived: the body rules have read a JSON body by now, so a slow upload is not counted.
        const arrivedAt = Date.now()
        const response = early ?? (yield* httpEffect.pipe(
          HttpServerRequest.withMaxBodySize(Option.some(MAX_JSON_BODY_BYTES)),
          Effect.catchAllCause((cause) =>
            // Interrupted means the client went away: there is no one to answer.
            Cause.isInterruptedOnly(cause)
              ? Effect.failCause(cause)
              : responseFromCause(cause, requestId, template === undefined ? routes.allowedMethods(request.url) : [])
          ),
          Effect.provideService(RequestId, requestId),
          Effect.provideService(RequestArrival, arrivedAt),
          Effect.annotateLogs("request_id", requestId)
        ))
        const identified = HttpServerResponse.setHeader(finishResponse(response, requestId), "x-request-id", requestId)
        // Every answer to a deprecated surface says so, refusals included (client-api.md "Versioning").
        const answered = deprecated === undefined ? identified : HttpServerResponse.setHeaders(identified, DEPRECATION_HEADERS)
        if (deprecated !== undefined) yield* logDeprecatedUse(deprecated).pipe(Effect.annotateLogs("request_id", requestId))
        // While draining, no connection is kept for another request: the next one goes to a node
        // that stays, and none arrives after this node stops handling requests.
        const finished = (yield* lifecycle.isDraining)
          ? HttpServerResponse.setHeader(answered, "connection", "close")
          : answered
        const seconds = (performance.now() - started) / 1000
        metrics.observeRequest(template ?? "unmatched", request.method, finished.status, seconds)
        if (!accessLog) return finished
        yield* Effect.logDebug("http request").pipe(
          Effect.annotateLogs({
            request_id: requestId,
            method: request.method,
            route: template ?? "unmatched",
            status: finished.status,
            duration_ms: Math.round(seconds * 1000)
          })
        )
        return finished
      })
  }),
  { global: true }
)
