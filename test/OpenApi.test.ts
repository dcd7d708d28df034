import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { nodeRoutes } from "../src/http/HttpLive.js"
import { request, TestNodeLive } from "./support/TestNode.js"

interface Operation {
  readonly parameters?: ReadonlyArray<{ name: string; in: string; schema: unknown }>
  readonly requestBody?: { content: Record<string, { schema: unknown }> }
  readonly responses: Record<string, { content?: Record<string, { schema: unknown }>; headers?: Record<string, unknown> }>
}

interface Document {
  readonly paths: Record<string, Record<string, Operation>>
  readonly components: { schemas: Record<string, unknown> }
}

const document = request("GET", "/api/v1/openapi.json").pipe(Effect.map((reply) => reply.body as Document))

/** A schema, its `$ref` followed. */
const resolve = (doc: Document, schema: unknown) => {
  const ref = (schema as { $ref?: string }).$ref?.match(/#\/components\/schemas\/(\w+)/)?.[1]
  return ref === undefined ? schema : doc.components.schemas[ref]
}

/** The envelope `{error: {code, message, details, request_id}}`, whatever the error. */
const envelopeShape = { properties: { error: { required: ["code", "message", "details", "request_id"] } } }

/** Checks that an operation answers each status with a body in the envelope (any member of a union). */
const expectEnvelopes = (doc: Document, operation: Operation, statuses: ReadonlyArray<string>) => {
  for (const status of statuses) {
    const content = operation.responses[status]?.content?.["application/json"]
    expect(content, status).toBeDefined()
    const members = (content!.schema as { anyOf?: ReadonlyArray<unknown> }).anyOf ?? [content!.schema]
    for (const member of members) expect(resolve(doc, member), status).toMatchObject(envelopeShape)
  }
}

layer(TestNodeLive(), { excludeTestServices: true })("OpenAPI document", (it) => {
  it.effect("GET /api/v1/openapi.json describes the REST families, with the envelope as error body", () =>
    Effect.gen(function*() {
      const reply = yield* request("GET", "/api/v1/openapi.json")
      expect(reply.status).toBe(200)
      const doc = reply.body as {
        openapi: string
        info: { title: string; version: string }
        paths: Record<string, Record<string, { responses: Record<string, { content?: Record<string, { schema: unknown }> }> }>>
        components: { schemas: Record<string, unknown> }
      }
      expect(doc.openapi).toMatch(/^3\./)
      expect(doc.info).toMatchObject({ title: "Parley", version: "0.2.0" })
      for (const path of [
        "/api/v1/admin/tenants",
        "/api/v1/manage/channels",
        "/api/v1/manage/users",
        "/api/v1/manage/api_keys",
        "/api/v1/manage/settings",
        "/api/v1/conversations",
        "/api/v1/conversations/{id}/activities",
        "/api/v1/chat/tokens/generate",
        "/api/v1/chat/tokens/refresh",
        "/api/v1/chat/tokens/revoke",
        "/api/v1/chat/tokens/publishable"
      ]) expect(Object.keys(doc.paths), path).toContain(path)
      // Branded ids decode to their lower-case form; the document still shows what a client sends: a UUID.
      const uuid = { type: "string", format: "uuid" }
      const schemaOf = (schema: unknown) => resolve(doc as Document, schema)
      for (const path of ["/api/v1/conversations/{id}", "/api/v1/admin/tenants/{id}", "/api/v1/manage/channels/{id}"]) {
        const get = doc.paths[path]!["get"] as unknown as { parameters: ReadonlyArray<{ name: string; in: string; schema: unknown }> }
        const id = get.parameters.find((p) => p.in === "path" && p.name === "id")
        expect(schemaOf(id?.schema), path).toMatchObject(uuid)
      }
      const conversation = doc.components.schemas["Conversation"] as { properties: Record<string, unknown> }
      for (const field of ["id", "tenant_id", "channel_id"]) expect(schemaOf(conversation.properties[field]), field).toMatchObject(uuid)
      const notFound = doc.paths["/api/v1/conversations/{id}/activities"]!["post"]!.responses["404"]!
      const ref = JSON.stringify(notFound.content?.["application/json"]?.schema).match(/#\/components\/schemas\/(\w+)/)?.[1]
      expect(doc.components.schemas[ref!]).toMatchObject({
        properties: { error: { required: ["code", "message", "details", "request_id"] } }
      })
    }))

  it.effect("the upload routes appear with their multipart request, their answers and every documented error", () =>
    Effect.gen(function*() {
      const doc = yield* document
      const upload = doc.paths["/api/v1/chat/conversations/{id}/upload"]?.["post"]
      expect(upload).toBeDefined()
      const form = upload!.requestBody!.content["multipart/form-data"]!.schema as { properties: Record<string, unknown> }
      expect(form).toMatchObject({ type: "object", required: ["file"], properties: { text: { type: "string" } } })
      expect(resolve(doc, form.properties["file"])).toMatchObject({ type: "string", format: "binary" })
      const created = resolve(doc, upload!.responses["201"]!.content!["application/json"]!.schema) as {
        properties: { attachment: { properties: Record<string, unknown> } }
      }
      expect(created).toMatchObject({
        required: expect.arrayContaining(["id", "attachment"]),
        properties: {
          id: { type: "string" },
          attachment: {
            required: expect.arrayContaining(["contentType", "contentUrl", "name", "size"]),
            properties: { contentType: { type: "string" }, contentUrl: { type: "string" }, name: { type: "string" } }
          }
        }
      })
      expect(resolve(doc, created.properties.attachment.properties["size"])).toMatchObject({ type: "integer" })
      // api-notes.md "Uploads": every status the route answers with, each in the envelope.
      expectEnvelopes(doc, upload!, ["400", "401", "403", "404", "409", "413", "415", "422", "429", "502", "503"])

      const download = doc.paths["/api/v1/chat/attachments/{id}"]?.["get"]
      expect(download).toBeDefined()
      const id = download!.parameters?.find((p) => p.in === "path" && p.name === "id")
      expect(resolve(doc, id?.schema)).toMatchObject({ type: "string", format: "uuid" })
      expect(download!.responses["200"]).toMatchObject({
        content: { "*/*": { schema: { type: "string", format: "binary" } } },
        headers: { "Content-Disposition": { schema: { type: "string" } }, "X-Content-Type-Options": { schema: { enum: ["nosniff"] } } }
      })
      expectEnvelopes(doc, download!, ["400", "401", "403", "404"])
    }))

  it.effect("the document and the route table name the same client routes", () =>
    Effect.gen(function*() {
      const doc = yield* document
      const documented = Object.entries(doc.paths).flatMap(([path, operations]) =>
        Object.keys(operations).map((method) => `${method.toUpperCase()} ${path.replace(/\{(\w+)\}/g, ":$1")}`)
      )
      const routed = nodeRoutes.map((route) => `${route.method} ${route.path}`)
      for (const route of documented) expect(routed, "documented but not routed").toContain(route)
      for (const route of routed.filter((r) => r.includes(" /api/v1/chat/"))) expect(documented, "routed but not documented").toContain(route)
    }))

  it.effect("a 400 is documented as the edge answers it, the envelope, and every $ref resolves", () =>
    Effect.gen(function*() {
      const doc = yield* document
      const text = JSON.stringify(doc)
      expect(text).not.toContain("HttpApiDecodeError")
      for (const [, name] of text.matchAll(/"#\/components\/schemas\/([^"]+)"/g)) expect(Object.keys(doc.components.schemas)).toContain(name)
      const badRequest = doc.paths["/api/v1/chat/conversations"]!["post"]!.responses["400"]!.content!["application/json"]!.schema
      expect(resolve(doc, badRequest)).toMatchObject(envelopeShape)
    }))
})
