import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Cause, Effect, Option } from "effect"
import { BadRequest, NotAcceptable, Unauthorized } from "../domain/ApiError.js"
import { AppConfig } from "../config/AppConfig.js"
import { Lifecycle } from "../ops/Lifecycle.js"
import { isClientApiUrl, isPreflight, preflightAnswer, withCorsHeaders } from "./ClientCors.js"
import { acceptsJson, MAX_JSON_BODY_BYTES, REQUEST_SHAPE_MISMATCH, retryAfterSeconds } from "./EdgeRules.js"
import { DEPRECATION_HEADERS } from "./DeprecationsPage.js"
import { answerForCause, answerForError, bodyTooLarge, responseOf } from "./ErrorAnswer.js"
import { answersOwnBody, refuseBody } from "./JsonBodyRules.js"
import { INVALID_CREATE_BODY, legacyRoutes } from "./LegacyRoutes.js"
import { RequestArrival, RequestId, requestIdFrom } from "./RequestId.js"
import { requestRecorder } from "./RequestRecorder.js"
import { RouteTable } from "./RouteTable.js"
import { ATTACHMENT_PATH } from "./UploadRoutes.js"
import { SSE_PATH } from "../realtime/SseRoute.js"

/**
 * The deprecated create answers an oversized body 401 (server-apis.md), before reading it: answered
 * after the server stopped reading, the client may see a reset instead.
 */
const legacyBodyTooLarge = (requestId: string) =>
  HttpServerResponse.setHeader(
    responseOf(answerForError(new Unauthorized({ message: INVALID_CREATE_BODY }), requestId)),
    "connection",
    "close"
  )

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
      const answer = answerForError(new BadRequest({ message: REQUEST_SHAPE_MISMATCH }), requestId)
      return HttpServerResponse.unsafeJson(answer.body, { status: answer.status, headers: response.headers })
    }
  }
  if ((response.status === 429 || response.status === 503) && response.headers["retry-after"] === undefined) {
    const body = jsonBodyOf(response) as { error?: { details?: { retry_after_ms?: number } | null } } | undefined
    return HttpServerResponse.setHeader(response, "retry-after", retryAfterSeconds(body?.error?.details?.retry_after_ms))
  }
  return response
}

/** Whether a request uses a deprecated surface: a legacy route, or any route with a channel token. */
const usesDeprecatedSurface = (request: HttpServerRequest.HttpServerRequest, template: string | undefined) =>
  request.headers["x-channel-token"] !== undefined ||
  legacyRoutes.some((route) => route.method === request.method && route.path === template)

/**
 * The edge of every HTTP request: request id, client CORS, content negotiation, body limits, the error
 * envelope, deprecation marks, metrics and one access log line.
 */
export const EdgeMiddleware = HttpLayerRouter.middleware(
  Effect.gen(function*() {
    const routes = yield* RouteTable
    const lifecycle = yield* Lifecycle
    const record = yield* requestRecorder
    const { corsAllowedOrigins } = yield* AppConfig
    return (httpEffect) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const requestId = requestIdFrom(request.headers["x-request-id"])
        const started = performance.now()
        const template = routes.template(request.method, request.url)
        // The router matches paths whatever their case, so this does too.
        const isApi = /^\/api\//i.test(request.url)
        const clientApi = isClientApiUrl(request.url)
        // Answered before authentication and every other rule: browsers send no credentials in a preflight.
        const preflight = clientApi && isPreflight(request)

        const contentLength = Number(request.headers["content-length"] ?? "0")
        const early = preflight
          ? preflightAnswer(corsAllowedOrigins, request.headers["origin"], routes.allowedMethods(request.url))
          : isApi && !acceptsJson(request.headers["accept"]) && template !== ATTACHMENT_PATH && template !== SSE_PATH
          ? responseOf(answerForError(new NotAcceptable({ message: "this API answers JSON only" }), requestId))
          : template !== undefined && contentLength > MAX_JSON_BODY_BYTES && !template.endsWith("/upload")
          ? answersOwnBody(request.method, template) ? legacyBodyTooLarge(requestId) : responseOf(answerForError(bodyTooLarge(), requestId))
          : template === undefined
          ? undefined
          : Option.getOrUndefined(Option.map(yield* refuseBody(request, template), (refusal) =>
            responseOf(answerForError(refusal._tag === "TooLarge" ? bodyTooLarge() : new BadRequest({ message: refusal.message }), requestId))))

        // Arrived: the body rules have read a JSON body by now, so a slow upload is not counted.
        const arrivedAt = Date.now()
        const response = early ?? (yield* httpEffect.pipe(
          HttpServerRequest.withMaxBodySize(Option.some(MAX_JSON_BODY_BYTES)),
          Effect.catchAllCause((cause) =>
            // Interrupted means the client went away: there is no one to answer.
            Cause.isInterruptedOnly(cause)
              ? Effect.failCause(cause)
              : Effect.map(
                answerForCause(cause, requestId, template === undefined ? routes.allowedMethods(request.url) : []),
                responseOf
              )
          ),
          Effect.provideService(RequestId, requestId),
          Effect.provideService(RequestArrival, arrivedAt),
          Effect.annotateLogs("request_id", requestId)
        ))
        const identified = HttpServerResponse.setHeader(finishResponse(response, requestId), "x-request-id", requestId)
        // Every answer to a deprecated surface says so, refusals included (client-api.md "Versioning").
        const marked = usesDeprecatedSurface(request, template)
          ? HttpServerResponse.setHeaders(identified, DEPRECATION_HEADERS)
          : identified
        // A browser reads an answer from another origin, an error's too, only with these headers.
        const answered = clientApi && !preflight
          ? withCorsHeaders(marked, corsAllowedOrigins, request.headers["origin"])
          : marked
        // While draining, no connection is kept for another request: the next one goes to a node
        // that stays, and none arrives after this node stops handling requests.
        const finished = (yield* lifecycle.isDraining)
          ? HttpServerResponse.setHeader(answered, "connection", "close")
          : answered
        yield* record(requestId, request.method, template ?? "unmatched", finished.status, started)
        return finished
      })
  }),
  { global: true }
)
