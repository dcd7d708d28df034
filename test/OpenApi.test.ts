import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { request, TestNodeLive } from "./support/TestNode.js"

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
      const schemaOf = (schema: unknown) => {
        const ref = (schema as { $ref?: string }).$ref?.match(/#\/components\/schemas\/(\w+)/)?.[1]
        return ref === undefined ? schema : doc.components.schemas[ref]
      }
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
})
