import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Effect, ParseResult, Schema } from "effect"
import type { WireError } from "../domain/ApiError.js"
import { RequestId } from "./RequestId.js"

/** The one error body of every HTTP API (client-api.md "Errors"). */
export const ErrorEnvelope = Schema.Struct({
  error: Schema.Struct({
    code: Schema.String,
    message: Schema.String,
    details: Schema.NullOr(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
    request_id: Schema.NullOr(Schema.String)
  })
})
export type ErrorEnvelope = typeof ErrorEnvelope.Type

/** Builds the envelope body. Only this module shapes error bodies. */
export const envelopeBody = (
  code: string,
  message: string,
  details: Record<string, unknown> | null,
  requestId: string | null
): ErrorEnvelope => ({ error: { code, message, details, request_id: requestId } })

/** The envelope of a typed error. */
export const toBody = (error: WireError, requestId: string | null): ErrorEnvelope =>
  envelopeBody(error.code, error.message, error.wireDetails, requestId)

/**
 * The error schema an endpoint declares: same status as the error, the envelope as its body, so the
 * OpenAPI document shows what clients really get.
 */
export const envelope = <A extends WireError, I, R>(error: Schema.Schema<A, I, R>) =>
  Schema.transformOrFail(ErrorEnvelope, Schema.typeSchema(error), {
    strict: true,
    // Encode-only: clients are not Effect clients, and tests assert on the JSON itself.
    decode: (body, _, ast) => ParseResult.fail(new ParseResult.Forbidden(ast, body, "encode only")),
    encode: (e) => Effect.map(RequestId, (requestId) => toBody(e, requestId))
  }).annotations(HttpApiSchema.annotations({ status: HttpApiSchema.getStatusErrorAST(error.ast) }))
