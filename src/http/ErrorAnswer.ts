import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Cause, Chunk, Effect, Option, type Schema } from "effect"
import { BadRequest, MethodNotAllowed, NotFound, PayloadTooLarge, type WireError } from "../domain/ApiError.js"
import {
  isBodyTooLarge,
  MAX_JSON_BODY_BYTES,
  REQUEST_BODY_TOO_LARGE,
  REQUEST_BODY_UNREADABLE,
  retryAfterSeconds
} from "./EdgeRules.js"
import { envelopeBody, type ErrorEnvelope, toBody } from "./ErrorEnvelope.js"

/** An error answer before it is written, wherever it is written: status, its own headers, envelope. */
export interface ErrorAnswer {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  readonly body: ErrorEnvelope
}

const noHeaders: Readonly<Record<string, string>> = Object.freeze({})

const isWireError = (u: unknown): u is WireError =>
  typeof u === "object" && u !== null && "code" in u && "wireDetails" in u && "message" in u &&
  typeof (u as WireError).code === "string"

/** The status an error class declares through its HttpApi annotation (500 when it declares none). */
const statusOf = (error: WireError): number => {
  const schema = error.constructor as unknown as Partial<Schema.Schema.Any>
  return schema.ast === undefined ? 500 : HttpApiSchema.getStatusErrorAST(schema.ast)
}

/** The headers an error's answer needs besides the envelope. */
const headersOf = (error: WireError, status: number): Readonly<Record<string, string>> =>
  error instanceof MethodNotAllowed
    ? { allow: error.allowed.join(", ") }
    // The rest of the body is never read, so the connection cannot carry another request.
    : error instanceof PayloadTooLarge
    ? { connection: "close" }
    : status === 429 || status === 503
    ? { "retry-after": retryAfterSeconds(error.wireDetails?.["retry_after_ms"]) }
    : noHeaders

/** The answer to a typed failure: the status its class declares, its envelope, the headers it needs. */
export const answerForError = (error: WireError, requestId: string): ErrorAnswer => {
  const status = statusOf(error)
  return { status, headers: headersOf(error, status), body: toBody(error, requestId) }
}

/** 413 for a JSON body over the limit, however it was framed. */
export const bodyTooLarge = () => new PayloadTooLarge({ message: REQUEST_BODY_TOO_LARGE, max_bytes: MAX_JSON_BODY_BYTES })

/** The catalogue error a failure is answered with, if the client may be told about it. */
const wireErrorOf = (failure: unknown, allowedMethods: ReadonlyArray<string>): WireError | undefined =>
  failure instanceof HttpServerError.RouteNotFound
    ? allowedMethods.length > 0
      ? new MethodNotAllowed({ message: "method not allowed on this route", allowed: allowedMethods })
      : new NotFound({ message: "no such route" })
    : failure instanceof HttpServerError.RequestError
    ? isBodyTooLarge(failure) ? bodyTooLarge() : new BadRequest({ message: REQUEST_BODY_UNREADABLE })
    : isWireError(failure)
    ? failure
    : undefined

/**
 * The answer to a failed request on either way in: a typed error's envelope, or a logged 500 `internal`.
 * `allowedMethods` turn an unmatched URL's 404 into a 405.
 */
export const answerForCause = (
  cause: Cause.Cause<unknown>,
  requestId: string,
  allowedMethods: ReadonlyArray<string> = []
): Effect.Effect<ErrorAnswer> => {
  // HttpApi turns an unreadable body into a defect (`orDie`), so defects are searched too.
  const failure = Chunk.head(Chunk.appendAll(Cause.failures(cause) as Chunk.Chunk<unknown>, Cause.defects(cause)))
  const error = Option.isSome(failure) ? wireErrorOf(failure.value, allowedMethods) : undefined
  if (error !== undefined) return Effect.succeed(answerForError(error, requestId))
  return Effect.logError("request failed unexpectedly", cause).pipe(
    Effect.annotateLogs("request_id", requestId),
    Effect.as({ status: 500, headers: noHeaders, body: envelopeBody("internal", "internal error", null, requestId) })
  )
}

/** An error answer as the router's response. */
export const responseOf = (answer: ErrorAnswer) =>
  HttpServerResponse.unsafeJson(answer.body, { status: answer.status, headers: answer.headers })
