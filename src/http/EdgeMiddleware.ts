import { HttpApiSchema, HttpLayerRouter, HttpServerError, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Cause, Chunk, Effect, Option, type Schema } from "effect"
import type { WireError } from "../domain/ApiError.js"
import { Lifecycle } from "../ops/Lifecycle.js"
import { Metrics } from "../ops/Metrics.js"
import { envelopeBody, envelopeResponse, toBody } from "./ErrorEnvelope.js"
import { RequestId, requestIdFrom } from "./RequestId.js"
import { RouteTable } from "./RouteTable.js"

/** Largest JSON body any API route reads; uploads set their own limit. */
export const MAX_JSON_BODY_BYTES = 1024 * 1024

const isWireError = (u: unknown): u is WireError =>
  typeof u === "object" && u !== null && "code" in u && "wireDetails" in u && "message" in u &&
  typeof (u as WireError).code === "string"

/** Accept excludes JSON when it names types and none of them can be JSON. */
const acceptsJson = (accept: string | undefined) => {
  if (accept === undefined || accept.trim() === "") return true
  return accept.split(",").some((part) => {
    const [type, ...params] = part.trim().toLowerCase().split(";")
    const q = params.map((p) => p.trim()).find((p) => p.startsWith("q="))
    if (q !== undefined && Number(q.slice(2)) === 0) return false
    return type === "*/*" || type === "application/*" || type === "application/json" ||
      (type?.startsWith("application/") === true && type.endsWith("+json"))
  })
}

/** The status an error class declares through its HttpApi annotation (500 when it declares none). */
const statusOfWireError = (error: WireError): number => {
  const schema = error.constructor as unknown as Partial<Schema.Schema.Any>
  return schema.ast === undefined ? 500 : HttpApiSchema.getStatusErrorAST(schema.ast)
}

/**
 * 413 for a JSON body over the limit. The rest of the body is never read, so the connection
 * cannot carry another request: it is closed once this answer is written.
 */
const payloadTooLarge = (requestId: string) =>
  HttpServerResponse.setHeader(
    envelopeResponse(413, "payload_too_large", "request body too large", { max_bytes: MAX_JSON_BODY_BYTES }, requestId),
    "connection",
    "close"
  )

const isBodyTooLarge = (error: HttpServerError.RequestError) =>
  error.cause instanceof Error && error.cause.message === "maxBytes exceeded"

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
          : envelopeResponse(400, "bad_request", "the request body could not be read or parsed", null, requestId)
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
        envelopeBody("bad_request", "the request does not match the expected shape", null, requestId),
        { status: 400, headers: response.headers }
      )
    }
  }
  if ((response.status === 429 || response.status === 503) && response.headers["retry-after"] === undefined) {
    const body = jsonBodyOf(response) as { error?: { details?: { retry_after_ms?: number } | null } } | undefined
    const ms = body?.error?.details?.retry_after_ms
    const seconds = typeof ms === "number" ? Math.max(1, Math.ceil(ms / 1000)) : 1
    return HttpServerResponse.setHeader(response, "retry-after", String(seconds))
  }
  return response
}

/**
 * The edge of every HTTP request: request id, content negotiation, body limits, the error envelope
 * for everything that is not a success, metrics and one access log line.
 */
export const EdgeMiddleware = HttpLayerRouter.middleware(
  Effect.gen(function*() {
    const metrics = yield* Metrics
    const routes = yield* RouteTable
    const lifecycle = yield* Lifecycle
    return (httpEffect) =>
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        const requestId = requestIdFrom(request.headers["x-request-id"])
        const started = performance.now()
        const template = routes.template(request.method, request.url)
        const isApi = request.url.startsWith("/api/")

        const contentLength = Number(request.headers["content-length"] ?? "0")
        const early = isApi && !acceptsJson(request.headers["accept"])
          ? envelopeResponse(406, "not_acceptable", "this API answers JSON only", null, requestId)
          : template !== undefined && contentLength > MAX_JSON_BODY_BYTES && !template.endsWith("/upload")
          ? payloadTooLarge(requestId)
          : undefined

        const response = early ?? (yield* httpEffect.pipe(
          HttpServerRequest.withMaxBodySize(Option.some(MAX_JSON_BODY_BYTES)),
          Effect.catchAllCause((cause) =>
            // Interrupted means the client went away: there is no one to answer.
            Cause.isInterruptedOnly(cause)
              ? Effect.failCause(cause)
              : responseFromCause(cause, requestId, template === undefined ? routes.allowedMethods(request.url) : [])
          ),
          Effect.provideService(RequestId, requestId),
          Effect.annotateLogs("request_id", requestId)
        ))
        const answered = HttpServerResponse.setHeader(finishResponse(response, requestId), "x-request-id", requestId)
        // While draining, no connection is kept for another request: the next one goes to a node
        // that stays, and none arrives after this node stops handling requests.
        const finished = (yield* lifecycle.isDraining)
          ? HttpServerResponse.setHeader(answered, "connection", "close")
          : answered
        const seconds = (performance.now() - started) / 1000
        metrics.observeRequest(template ?? "unmatched", request.method, finished.status, seconds)
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
