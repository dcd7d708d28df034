import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as OpenApi from "@effect/platform/OpenApi"
import { Effect } from "effect"
import { ClientEventsApi } from "./ClientEventsApi.js"
import { ClientUploadsApi } from "./ClientUploadsApi.js"
import { ParleyApi } from "./ParleyApi.js"
import type { RouteSpec } from "./RouteTable.js"

const OPENAPI_PATH = "/api/v1/openapi.json"

/** The route serving the document, for the route table. */
export const openApiRoutes: ReadonlyArray<RouteSpec> = [{ method: "GET", path: OPENAPI_PATH }]

const DECODE_ERROR_REF = "#/components/schemas/HttpApiDecodeError"

/**
 * A part of the document as the edge answers: the edge rewrites `HttpApiDecodeError` into the
 * envelope (`rewriteDecodeError`), so that member of a union goes, and an envelope declared twice
 * (by the API and by a middleware) appears once.
 */
const answered = (node: unknown): unknown => {
  if (Array.isArray(node)) return node.map(answered)
  if (node === null || typeof node !== "object") return node
  const object = Object.fromEntries(Object.entries(node).map(([key, value]) => [key, answered(value)]))
  if (!Array.isArray(object["anyOf"])) return object
  const members = [...new Map(object["anyOf"].map((member) => [JSON.stringify(member), member])).entries()]
    .filter(([key]) => !key.includes(DECODE_ERROR_REF))
    .map(([, member]) => member)
  return members.length === 1 && Object.keys(object).length === 1 ? members[0] : { ...object, anyOf: members }
}

/** The document without the decode error, its schemas gone with it. */
const withAnsweredErrors = (spec: Record<string, unknown>) => {
  const { components, ...rest } = spec as { components: { schemas: Record<string, unknown> } }
  const { HttpApiDecodeError: _decodeError, Issue: _issue, PropertyKey: _propertyKey, ...schemas } = components.schemas
  return answered({ ...rest, components: { ...components, schemas } }) as Record<string, unknown>
}

/** What the document describes: the HttpApi families and the raw upload and event stream routes (ADR 0026). */
export const DocumentedApi = ParleyApi.add(ClientUploadsApi).add(ClientEventsApi).annotate(OpenApi.Transform, withAnsweredErrors)

/** `GET /api/v1/openapi.json`: the OpenAPI document of every REST route, built once. */
export const OpenApiRoute = HttpLayerRouter.add(
  "GET",
  OPENAPI_PATH,
  Effect.succeed(HttpServerResponse.unsafeJson(OpenApi.fromApi(DocumentedApi)))
)
