import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { TestNodeLive } from "./support/TestNode.js"

layer(TestNodeLive({ CONVERSATION_IDLE_CLOSE_SECONDS: "2", CONVERSATION_EXPIRY_CHECK_SECONDS: "1" }), {
  excludeTestServices: true
})("inactivity auto-close", (it) => {
  it.effect("an idle conversation closes with reason expired; a busy one stays open", () =>
    Effect.gen(function*() {
      const idle = yield* tenantWithConversation
      const busy = yield* tenantWithConversation
      yield* tenantApi(idle.key, "POST", `/conversations/${idle.conversationId}/activities`, { text: "hello" })
      for (let i = 0; i < 10; i++) {
        yield* tenantApi(busy.key, "POST", `/conversations/${busy.conversationId}/activities`, { text: `tick ${i}` })
        yield* Effect.sleep("400 millis")
      }
      const closed = (yield* tenantApi(idle.key, "GET", `/conversations/${idle.conversationId}`)).body.data
      expect(closed.status).toBe("closed")
      const events = (yield* tenantApi(idle.key, "GET", `/conversations/${idle.conversationId}/activities`)).body.data
      expect(events.map((a: { seq: number }) => a.seq)).toEqual([1, 2])
      expect(events[1]).toMatchObject({
        type: "conversationUpdate",
        sender: "system",
        metadata: { event: "conversation_closed", status: "closed", reason: "expired" }
      })
      expect((yield* tenantApi(busy.key, "GET", `/conversations/${busy.conversationId}`)).body.data.status).toBe("active")
    }))
})
