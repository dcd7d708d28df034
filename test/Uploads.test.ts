import { describe, expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { BlobStore } from "../src/db/BlobStore.js"
import { tenantWithConversation } from "./support/Fixtures.js"
import { query } from "./support/TestDatabase.js"
import { TestNodeLive } from "./support/TestNode.js"

layer(TestNodeLive(), { excludeTestServices: true })("uploads", (it) => {
  describe("BlobStore", () => {
    it.effect("stores the bytes with tenant and conversation; found only within the tenant; gone with its conversation", () =>
      Effect.gen(function*() {
        const blobs = yield* BlobStore
        const { channel, conversationId, tenant } = yield* tenantWithConversation
        const bytes = new Uint8Array([0, 1, 2, 255, 254, 0x89, 0x50])
        const id = yield* blobs.put({ tenantId: tenant.id, conversationId, contentType: "image/png", name: "a.png", bytes })
        const found = yield* blobs.find(tenant.id, id)
        expect(Option.map(found, (blob) => ({ ...blob, bytes: [...blob.bytes] }))).toEqual(Option.some({
          id,
          tenant_id: tenant.id,
          conversation_id: conversationId,
          channel_id: channel.id,
          content_type: "image/png",
          name: "a.png",
          size: bytes.length,
          bytes: [...bytes]
        }))
        expect(yield* blobs.find(crypto.randomUUID(), id)).toEqual(Option.none())
        yield* query("DELETE FROM conversations WHERE id = $1", [conversationId])
        expect(yield* blobs.find(tenant.id, id)).toEqual(Option.none())
      }).pipe(Effect.provide(BlobStore.Default)))
  })
})
