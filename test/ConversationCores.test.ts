import { expect, layer } from "@effect/vitest"
import { Context, Effect, Layer, Stream } from "effect"
import { ConversationCores } from "../src/conversations/ConversationCores.js"
import { ConversationId } from "../src/domain/Conversation.js"
import { eventually } from "./support/Eventually.js"
import { insertConversation, tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { TestNodeLive } from "./support/TestNode.js"

layer(TestNodeLive(), { excludeTestServices: true })("conversation cores", (it) => {
  it.effect("appends to unknown conversations leave no core running; a conversation made later takes appends", () =>
    Effect.gen(function*() {
      const cores = yield* ConversationCores
      const { channel, key, tenant } = yield* tenantWithConversation
      const before = cores.running()
      const ids = Array.from({ length: 50 }, () => ConversationId.to.make(crypto.randomUUID()))
      const statuses = yield* Effect.forEach(
        ids,
        (id) => Effect.map(tenantApi(key, "POST", `/conversations/${id}/activities`, { text: "hi" }), (reply) => reply.status),
        { concurrency: 10 }
      )
      expect(statuses).toEqual(ids.map(() => 404))
      expect(ids.filter((id) => cores.find(id) !== undefined)).toEqual([])
      expect(cores.running()).toBeLessThanOrEqual(before)
      // The id now names a conversation: the next append starts a core that finds it.
      yield* insertConversation(tenant.id, channel.id, { id: ids[0]! })
      const reply = yield* tenantApi(key, "POST", `/conversations/${ids[0]}/activities`, { text: "now it exists" })
      expect(reply.status).toBe(201)
      expect(cores.find(ids[0]!)).toBeDefined()
    }))

  it.scoped("past its bound the registry drops the least recently used idle core, never one with a stream open", () =>
    Effect.gen(function*() {
      const cores = Context.get(yield* Layer.build(ConversationCores.Default(2)), ConversationCores)
      const [a, b, c, d, e] = yield* Effect.forEach(
        Array.from({ length: 5 }),
        () => Effect.map(tenantWithConversation, (made) => made.conversationId)
      )
      const running = (ids: ReadonlyArray<ConversationId>) => ids.filter((id) => cores.find(id) !== undefined)
      /** A listener on the conversation's core, open until the test ends. */
      const listen = (id: ConversationId) =>
        Effect.gen(function*() {
          const core = cores.find(id)!
          yield* Effect.forkScoped(Stream.runDrain(core.subscribe(0)))
          yield* eventually(Effect.sync(core.subscribers), (open) => open === 1)
        })

      yield* cores.get(a)
      yield* cores.get(b)
      cores.find(a)
      yield* cores.get(c)
      // `b` was used least recently.
      expect(cores.running()).toBe(2)
      expect(running([a, b, c])).toEqual([a, c])

      // `a` has a listener: it is passed over although used least recently.
      yield* listen(a)
      cores.find(c)
      yield* cores.get(d)
      expect(cores.running()).toBe(2)
      expect(running([a, c, d])).toEqual([a, d])

      // Every core is busy: the new one starts anyway, over the bound.
      yield* listen(d)
      yield* cores.get(e)
      expect(cores.running()).toBe(3)
      expect(running([a, d, e])).toEqual([a, d, e])
    }))
})
