import { expect, layer } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { ConversationHub } from "../src/realtime/ConversationHub.js"
import { eventually } from "./support/Eventually.js"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { request, TestNodeLive } from "./support/TestNode.js"

layer(TestNodeLive(), { excludeTestServices: true })("node metrics", (it) => {
  it.effect("activities stored, shards, entities and live streams of this node appear in /metrics", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "counted" })
      // A listener: this node's hub follows the conversation through one stream from its core.
      yield* Effect.forkScoped(Stream.runDrain((yield* ConversationHub).subscribe(conversationId, 0)))
      const text = yield* eventually(
        Effect.map(request("GET", "/metrics"), (reply) => reply.body as string),
        (body) => /^parley_conversation_streams 1$/m.test(body),
        { within: "10 seconds" }
      )
      expect(text).toMatch(/^parley_activities_stored_total [1-9]/m)
      expect(text).toMatch(/^parley_cluster_shards_owned 300$/m)
      expect(text).toMatch(/^parley_cluster_entities_active \d+$/m)
      expect(text).toMatch(/^parley_conversations_running [1-9]/m)
      expect(text).toMatch(/^parley_conversation_streams 1$/m)
      expect(text).toMatch(/^# TYPE parley_rate_limit_rejections_total counter$/m)
    }).pipe(Effect.scoped))
})
