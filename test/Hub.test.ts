import { expect, layer } from "@effect/vitest"
import { Chunk, Effect, Fiber, Stream } from "effect"
import { ConversationHub } from "../src/realtime/ConversationHub.js"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { TestNodeLive } from "./support/TestNode.js"

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
})
