import { expect, layer } from "@effect/vitest"
import { Cause, Effect, Fiber, FiberId, Schedule } from "effect"
import { closeIdleConversations } from "../cluster/ConversationExpiry.js"
import { overrideConversationCall } from "./support/EntityCallOverride.js"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { query } from "./support/TestDatabase.js"
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

// Checked by hand here: the node's own check runs at start and then once an hour.
layer(TestNodeLive({ CONVERSATION_EXPIRY_CHECK_SECONDS: "3600" }), { excludeTestServices: true })("expiry check", (it) => {
  it.effect("a close ended by an interruption from the cluster's side leaves that conversation open; the check goes on", () =>
    Effect.gen(function*() {
      const cut = yield* tenantWithConversation
      const next = yield* tenantWithConversation
      // Both idle for a while, `cut` longer: the check takes it first.
      yield* query("UPDATE conversations SET updated_at = now() - interval '2 hours' WHERE id = $1", [cut.conversationId])
      yield* query("UPDATE conversations SET updated_at = now() - interval '1 hour' WHERE id = $1", [next.conversationId])
      // `cut`'s close ends as a call does whose owner stopped it mid-way.
      const CutInterrupted = overrideConversationCall("SetStatus", (real, entityId) =>
        entityId === cut.conversationId
          ? () => Effect.failCause(Cause.interrupt(FiberId.make(1_000_000, 0)))
          : real.SetStatus)
      yield* Effect.exit(closeIdleConversations(60, 1000).pipe(Effect.provide(CutInterrupted)))
      const statuses = yield* query<{ id: string; status: string }>(
        "SELECT id, status FROM conversations WHERE id = ANY($1::uuid[])",
        [[cut.conversationId, next.conversationId]]
      )
      expect(new Map(statuses.map((row) => [row.id, row.status]))).toEqual(
        new Map([[cut.conversationId, "active"], [next.conversationId, "closed"]])
      )
    }))

  it.effect("conversations whose closes keep failing do not hold back the idle ones after them", () =>
    Effect.gen(function*() {
      const failing = [yield* tenantWithConversation, yield* tenantWithConversation]
      const later = yield* tenantWithConversation
      // The failing two are the oldest: with a page of two, they fill the check's first page.
      yield* query("UPDATE conversations SET updated_at = now() - interval '3 hours' WHERE id = ANY($1::uuid[])", [
        failing.map((f) => f.conversationId)
      ])
      yield* query("UPDATE conversations SET updated_at = now() - interval '1 hour' WHERE id = $1", [later.conversationId])
      const failingIds = new Set<string>(failing.map((f) => f.conversationId))
      const FailingCloses = overrideConversationCall("SetStatus", (real, entityId) =>
        failingIds.has(entityId) ? () => Effect.fail(new Error("owner unreachable")) : real.SetStatus)
      yield* closeIdleConversations(60, 1000, 2).pipe(Effect.provide(FailingCloses))
      const statuses = yield* query<{ id: string; status: string }>(
        "SELECT id, status FROM conversations WHERE id = ANY($1::uuid[])",
        [[...failingIds, later.conversationId]]
      )
      expect(new Map(statuses.map((row) => [row.id, row.status]))).toEqual(
        new Map([...[...failingIds].map((id) => [id, "active"] as const), [later.conversationId, "closed"]])
      )
    }))

  it.effect("a check starts at most closesPerSecond closes a second", () =>
    Effect.gen(function*() {
      const idle = yield* Effect.forEach(Array.from({ length: 6 }), () => tenantWithConversation)
      const ids = idle.map((c) => c.conversationId)
      yield* query("UPDATE conversations SET updated_at = now() - interval '2 hours' WHERE id = ANY($1::uuid[])", [ids])
      const started = Date.now()
      yield* closeIdleConversations(60, 10)
      // Six closes at most ten a second: the sixth starts 500 ms after the first, at the earliest.
      expect(Date.now() - started).toBeGreaterThanOrEqual(500)
      const statuses = yield* query<{ status: string }>("SELECT status FROM conversations WHERE id = ANY($1::uuid[])", [ids])
      expect(statuses.map((row) => row.status)).toEqual(ids.map(() => "closed"))
    }))
})
