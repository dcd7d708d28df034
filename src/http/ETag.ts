import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect } from "effect"
import { etagOf } from "../domain/Version.js"

/**
 * Answers `{data}` with the `ETag` of `version` (by default `data` itself). Pass the resource when
 * `data` adds a once-only secret, so the tag equals the one `If-Match` is later checked against.
 */
export const withETag = <A>(data: A, version: unknown = data) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeader(response, "etag", etagOf(version)))
  ).pipe(Effect.as({ data }))
