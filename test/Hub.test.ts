import { expect, layer } from "@effect/vitest"
import { Chunk, Deferred, Effect, Fiber, Stream } from "effect"
import { LIVE_BUFFER } from "../src/conversations/SeqFollower.js"
import { ConversationHub } from "../src/realtime/ConversationHub.js"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { query } from "./support/TestDatabase.js"
import { admin, TestNodeLive } from "./support/TestNode.js"

layer(TestNodeLive(), { excludeTestServices: true })("node-local hub", (it) => {
  it.effect("a listener gets stored history from its watermark, then live activities in order", () =>
    Effect.gen(function*() {
      const hub = yield* ConversationHub
      const { conversationId, key } = yield* tenantWithConversation
      const path = `/conversations/${conversationId}/activities`
      for (let i = 1; i <= 3; i++) yield* tenantApi(key, "POST", path, { text: `m${i}` })
      const listener = yield* hub.subscribe(conversationId, 1).pipe(Stream.take(6), Stream.runCollect, Effect.fork)
      const second = yield* hub.subscribe(conversationId, 0).pipe(Stream.take(7), Stream.runCollect, Effect.fork)
      yield* Effect.sleep("200 millis")
      for (let i = 4; i <= 7; i++) yield* tenantApi(key, "POST", path, { text: `m${i}` })
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(listener))
      expect(seen.map((a) => a.seq)).toEqual([2, 3, 4, 5, 6, 7])
      expect(seen.map((a) => a.text)).toEqual(["m2", "m3", "m4", "m5", "m6", "m7"])
      expect(Chunk.toReadonlyArray(yield* Fiber.join(second)).map((a) => a.seq)).toEqual([1, 2, 3, 4, 5, 6, 7])
    }))

  it.effect("a conversation whose last listener left is followed again by the next one, in any spelling", () =>
    Effect.gen(function*() {
      const hub = yield* ConversationHub
      const { conversationId, key } = yield* tenantWithConversation
      const path = `/conversations/${conversationId}/activities`
      yield* tenantApi(key, "POST", path, { text: "first" })
      const once = yield* hub.subscribe(conversationId, 0).pipe(Stream.take(1), Stream.runCollect)
      expect(Chunk.toReadonlyArray(once).map((a) => a.text)).toEqual(["first"])
      // However the id is spelled: the same topic, following the same entity.
      const next = yield* hub.subscribe(conversationId.toUpperCase(), 1).pipe(Stream.take(1), Stream.runCollect, Effect.fork)
      yield* Effect.sleep("200 millis")
      yield* tenantApi(key, "POST", path, { text: "second" })
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(next).pipe(Effect.timeout("10 seconds")))
      expect(seen.map((a) => [a.seq, a.text])).toEqual([[2, "second"]])
    }))

  it.effect("an activity the upstream never announces reaches listeners through the gap check", () =>
    Effect.gen(function*() {
      const hub = yield* ConversationHub
      const { conversationId, key, tenant } = yield* tenantWithConversation
      const path = `/conversations/${conversationId}/activities`
      yield* tenantApi(key, "POST", path, { text: "announced" })
      const listener = yield* hub.subscribe(conversationId, 0).pipe(Stream.take(2), Stream.runCollect, Effect.fork)
      yield* Effect.sleep("200 millis")
      // Committed behind the entity's back, as a write whose announcement was lost would be.
      yield* query(
        `INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text)
         VALUES ($1, 2, $2, $3, 'message', 'user', 'silent')`,
        [conversationId, crypto.randomUUID(), tenant.id]
      )
      yield* query("UPDATE conversations SET head_seq = 2 WHERE id = $1", [conversationId])
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(listener).pipe(Effect.timeout("10 seconds")))
      expect(seen.map((a) => [a.seq, a.text])).toEqual([[1, "announced"], [2, "silent"]])
    }))

  it.effect("a listener slower than the live buffer still gets every activity once, in order", () =>
    Effect.gen(function*() {
      const hub = yield* ConversationHub
      const { conversationId, key, tenant } = yield* tenantWithConversation
      yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { limits: { activity_create: { limit: 100000, scale_ms: 1000 } } } })
      const total = LIVE_BUFFER + 200
      const gate = yield* Deferred.make<void>()
      // Holds its first activity until every append is done: the rest overflow the live buffer.
      const listener = yield* hub.subscribe(conversationId, 0).pipe(
        Stream.tap(() => Deferred.await(gate)),
        Stream.take(total),
        Stream.runCollect,
        Effect.fork
      )
      yield* Effect.sleep("200 millis")
      const path = `/conversations/${conversationId}/activities`
      yield* Effect.forEach(Array.from({ length: total }, (_, i) => i + 1), (i) =>
        Effect.flatMap(tenantApi(key, "POST", path, { text: `m${i}` }), (reply) =>
          Effect.sync(() => expect(reply.status).toBe(201))), { concurrency: 16, discard: true })
      yield* Deferred.succeed(gate, undefined)
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(listener).pipe(Effect.timeout("30 seconds")))
      expect(seen.map((a) => a.seq)).toEqual(Array.from({ length: total }, (_, i) => i + 1))
    }), 60_000)
})
