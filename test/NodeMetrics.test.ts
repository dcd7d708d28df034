import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { request, TestNodeLive } from "./support/TestNode.js"

layer(TestNodeLive(), { excludeTestServices: true })("node metrics", (it) => {
  it.effect("activities stored, shards and entities of this node appear in /metrics", () =>
    Effect.gen(function*() {
      const { conversationId, key } = yield* tenantWithConversation
      yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "counted" })
      const text = (yield* request("GET", "/metrics")).body as string
      expect(text).toMatch(/^parley_activities_stored_total [1-9]/m)
      expect(text).toMatch(/^parley_cluster_shards_owned 300$/m)
      expect(text).toMatch(/^parley_cluster_entities_active \d+$/m)
      expect(text).toMatch(/^parley_conversations_running [1-9]/m)
      expect(text).toMatch(/^# TYPE parley_rate_limit_rejections_total counter$/m)
    }))
})
