import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Effect, Option } from "effect"
import { ValidationFailed } from "../domain/ApiError.js"
import { fieldPath } from "../domain/Problems.js"
import { findUnstorable } from "../domain/Unstorable.js"
import {
  isBodyTooLarge,
  isJsonContentType,
  MAX_JSON_BODY_BYTES,
  MAX_JSON_DEPTH,
  nestsDeeperThan,
  REQUEST_BODY_TOO_DEEP
} from "./EdgeRules.js"

/**
 * Why the edge answers a request's body itself, before any route reads it: a 400 `bad_request`, or
 * a body over the size limit (answered as a declared length over it is, the connection closed).
 */
type BodyRefusal =
  | { readonly _tag: "BadRequest"; readonly message: string }
  | { readonly _tag: "TooLarge" }

/**
 * Whether HttpApi reads the body as JSON text (`application/json` or no type). It reads other types
 * another way and would take them for a payload, so they are refused here.
 */
const isReadAsJson = (request: HttpServerRequest.HttpServerRequest) => isJsonContentType(request.headers["content-type"])

const hasBody = (request: HttpServerRequest.HttpServerRequest) =>
  Number(request.headers["content-length"] ?? "0") > 0 || request.headers["transfer-encoding"] !== undefined

/**
 * The deprecated `POST /api/v1/conversations` maps every bad body to 401 (server-apis.md), after
 * its token check: it applies these rules itself.
 */
export const answersOwnBody = (method: string, template: string) => method === "POST" && template === "/api/v1/conversations"

/** The first unstorable value of a resource body, keyed as its validation details are (below the wrapper). */
const unstorableField = (text: string): Option.Option<readonly [field: string, problem: string]> => {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return Option.none() // the route answers malformed JSON
  }
  const found = findUnstorable(body)
  if (found === undefined) return Option.none()
  const { path, problem } = found
  return Option.some([(path.length > 1 ? path.slice(1) : path).reduce<string>(fieldPath, ""), problem])
}

/**
 * The body rules every API route shares, checked once at the edge: JSON only (uploads aside), at most
 * `MAX_JSON_DEPTH` deep, as decoding and redaction recurse. An unreadable body is the route's to answer.
 */
export const refuseBody = (
  request: HttpServerRequest.HttpServerRequest,
  template: string
): Effect.Effect<Option.Option<BodyRefusal>> => {
  if (answersOwnBody(request.method, template)) return Effect.succeed(Option.none())
  const isApi = template.startsWith("/api/")
  if (isApi && !template.endsWith("/upload") && hasBody(request) && !isReadAsJson(request)) {
    return Effect.succeed(Option.some({
      _tag: "BadRequest",
      message: "the request body must be JSON (content-type application/json)"
    }))
  }
  // Nothing to read: most requests (every GET) have no body.
  if (!hasBody(request) || !isReadAsJson(request)) return Effect.succeed(Option.none())
  return request.text.pipe(
    HttpServerRequest.withMaxBodySize(Option.some(MAX_JSON_BODY_BYTES)),
    Effect.map((text): Option.Option<BodyRefusal> =>
      nestsDeeperThan(text, MAX_JSON_DEPTH)
        ? Option.some({ _tag: "BadRequest", message: REQUEST_BODY_TOO_DEEP })
        : Option.none()
    ),
    Effect.catchAll((error) =>
      // Over the size limit however it was framed (a chunked body declares no length): refused
      // here, before any credential, as a declared length over the limit is. Other read failures
      // are the route's to answer.
      Effect.succeed(
        error._tag === "RequestError" && isBodyTooLarge(error)
          ? Option.some<BodyRefusal>({ _tag: "TooLarge" })
          : Option.none<BodyRefusal>()
      )
    )
  )
}

/**
 * 422 `validation_failed` for a management or admin body holding a string PostgreSQL cannot store; run
 * after authentication, so a caller without a valid credential learns nothing from the body.
 */
export const refuseUnstorableBody: Effect.Effect<void, ValidationFailed, HttpServerRequest.HttpServerRequest> =
  Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) =>
    !hasBody(request) || !isReadAsJson(request) ? Effect.void : request.text.pipe(
      Effect.map(unstorableField),
      // A body that cannot be read is the route's to answer.
      Effect.orElseSucceed(() => Option.none<readonly [string, string]>()),
      Effect.flatMap(Option.match({
        onNone: () => Effect.void,
        onSome: ([field, problem]) => Effect.fail(new ValidationFailed({ message: "validation failed", fields: { [field]: [problem] } }))
      }))
    ))
