import { expect, layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import { ActivityStore } from "../src/conversations/ActivityStore.js"
import { insertChannel, insertConversation, messageDraft } from "./support/Fixtures.js"
import { query } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"


const storedTexts = (conversationId: string) =>
  Effect.map(
    query<{ seq: string; text: string }>("SELECT seq, text FROM activities WHERE conversation_id = $1 ORDER BY seq", [conversationId]),
    (rows) => rows.map((r) => [Number(r.seq), r.text] as const)
  )

layer(TestNodeLive(), { excludeTestServices: true })("activity store", (it) => {
  it.effect("groups written together: one with a moved head fails alone, the others commit", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id)
      const [fresh, moved] = yield* Effect.all([insertConversation(tenant.id, channel.id), insertConversation(tenant.id, channel.id)])
      const store = yield* ActivityStore
      const group = (conversationId: string, oldHead: number, text: string) => ({
        conversationId,
        tenantId: tenant.id,
        oldHead,
        activities: [messageDraft(text)],
        deliveries: [],
        status: null
      })
      // `moved` is at head 0, so a writer that believes it is at 3 must lose.
      const [ok, lost] = yield* Effect.all([
        Effect.either(store.write(group(fresh, 0, "kept"))),
        Effect.either(store.write(group(moved, 3, "refused")))
      ], { concurrency: "unbounded" })
      expect(Either.isRight(ok) && ok.right.map((a) => [a.seq, a.text])).toEqual([[1, "kept"]])
      expect(Either.isLeft(lost) && lost.left._tag).toBe("SeqTaken")
      expect(yield* storedTexts(fresh)).toEqual([[1, "kept"]])
      expect(yield* storedTexts(moved)).toEqual([])
      const heads = yield* query<{ id: string; head_seq: string }>(
        "SELECT id, head_seq FROM conversations WHERE id = ANY($1::uuid[])",
        [[fresh, moved]]
      )
      expect(Object.fromEntries(heads.map((h) => [h.id, Number(h.head_seq)]))).toEqual({ [fresh]: 1, [moved]: 0 })
    }))
})
