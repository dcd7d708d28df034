import { expect, layer } from "@effect/vitest"
import { Effect, Fiber, Schedule } from "effect"
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
      // The busy one gets a post every 400 ms, far within the 2 s it may stay idle.
      const keepBusy = yield* Effect.fork(Effect.forever(
        tenantApi(busy.key, "POST", `/conversations/${busy.conversationId}/activities`, { text: "tick" }).pipe(
          Effect.zipRight(Effect.sleep("400 millis"))
        )
      ))
      // Two idle periods and checks at least; then as long as a slow sweep takes.
      yield* Effect.sleep("4 seconds")
      const closed = yield* tenantApi(idle.key, "GET", `/conversations/${idle.conversationId}`).pipe(
        Effect.map((reply) => reply.body.data),
        Effect.filterOrFail((data) => data.status === "closed", () => "still open"),
        Effect.retry(Schedule.spaced("200 millis")),
        Effect.timeout("20 seconds")
      )
      const busyNow = (yield* tenantApi(busy.key, "GET", `/conversations/${busy.conversationId}`)).body.data
      yield* Fiber.interrupt(keepBusy)
      expect(closed.status).toBe("closed")
      expect(busyNow.status).toBe("active")
      const events = (yield* tenantApi(idle.key, "GET", `/conversations/${idle.conversationId}/activities`)).body.data
      expect(events.map((a: { seq: number }) => a.seq)).toEqual([1, 2])
      expect(events[1]).toMatchObject({
        type: "conversationUpdate",
        sender: "system",
        metadata: { event: "conversation_closed", status: "closed", reason: "expired" }
      })
    }))
})
