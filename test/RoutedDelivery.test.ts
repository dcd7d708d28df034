import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { eventually } from "./support/Eventually.js"
import { insertConversation, tenantApi } from "./support/Fixtures.js"
import { createChannel } from "./support/ManageClient.js"
import { query } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

interface DeliveryRow {
  readonly activity_id: string
  readonly channel_id: string
  readonly status: string
  readonly payload: { readonly text: string | null; readonly metadata: Record<string, unknown> }
}

const deliveriesOf = (conversationId: string) =>
  query<DeliveryRow>(
    `SELECT activity_id::text, channel_id::text, status, payload FROM deliveries WHERE conversation_id = $1 ORDER BY inserted_at, channel_id`,
    [conversationId]
  )

/** Pull channels (the outbox shows what the loop sent): an origin that can receive, and two outbound targets. */
const routedTenant = Effect.gen(function*() {
  const tenant = yield* createTenant()
  const pull = { type: "http_pull", config: {} }
  const origin = yield* createChannel(tenant.api_key, { ...pull, mode: "duplex" })
  const target = yield* createChannel(tenant.api_key, {
    ...pull,
    mode: "outbound",
    transformations: [{ type: "prefix_text", value: "[routed] " }]
  })
  const gold = yield* createChannel(tenant.api_key, { ...pull, mode: "outbound" })
  const rule = (body: Record<string, unknown>) =>
    tenantApi(tenant.api_key, "POST", "/routing_rules", {
      routing_rule: { name: `rule-${crypto.randomUUID().slice(0, 8)}`, source_channel_id: origin.id, ...body }
    }).pipe(Effect.tap((reply) => expect(reply.status).toBe(201)), Effect.map((reply) => reply.body.data.id as string))
  const urgent = yield* rule({
    target_channel_ids: [target.id],
    conditions: { field: "activity.text", op: "contains", value: "urgent" },
    transformations: [{ type: "set_metadata", key: "routed_by", value: "urgent rule" }]
  })
  yield* rule({ target_channel_ids: [gold.id], conditions: { field: "conversation.metadata.tier", op: "eq", value: "gold" } })
  const conversationId = yield* insertConversation(tenant.id, origin.id, { metadata: { tier: "silver" } })
  const post = (text: string) =>
    tenantApi(tenant.api_key, "POST", `/conversations/${conversationId}/activities`, { text, metadata: { n: 1 } }).pipe(
      Effect.tap((reply) => expect(reply.status).toBe(201)),
      Effect.map((reply) => reply.body.data.id as string)
    )
  return { tenant, origin, target, gold, urgent, conversationId, post }
})

layer(TestNodeLive({ DELIVERY_SWEEP_MS: "60000" }), { excludeTestServices: true })("deliveries planned on append", (it) => {
  it.scoped("an append goes to its origin and to the targets of the origin's matching rules, each with its copy", () =>
    Effect.gen(function*() {
      const { conversationId, origin, post, target, tenant } = yield* routedTenant
      const urgent = yield* post("urgent: call me back")
      const plain = yield* post("hello")

      const rows = yield* deliveriesOf(conversationId)
      expect(rows.map((row) => [row.activity_id, row.channel_id]).sort()).toEqual(
        [[urgent, origin.id], [urgent, target.id], [plain, origin.id]].sort()
      )
      const toOrigin = rows.find((row) => row.activity_id === urgent && row.channel_id === origin.id)!
      const toTarget = rows.find((row) => row.channel_id === target.id)!
      // The origin gets the activity as stored; the target its own chain, then the rule's.
      expect(toOrigin.payload).toMatchObject({ text: "urgent: call me back", metadata: { n: 1 } })
      expect(toTarget.payload).toMatchObject({ text: "[routed] urgent: call me back", metadata: { n: 1, routed_by: "urgent rule" } })
      const stored = yield* tenantApi(tenant.api_key, "GET", `/conversations/${conversationId}/activities`)
      expect(stored.body.data.map((a: { text: string }) => a.text)).toEqual(["urgent: call me back", "hello"])
      // The conversation now has the target among its channels (server-apis.md: role `target`).
      const conversation = yield* tenantApi(tenant.api_key, "GET", `/conversations/${conversationId}`)
      expect(conversation.body.data.channels.map((c: { channel_id: string; role: string }) => [c.channel_id, c.role]).sort()).toEqual(
        [[origin.id, "origin"], [target.id, "target"]].sort()
      )

      // The append woke the target's loop (the sweep is a minute away): the copy is in its outbox.
      yield* eventually(
        tenantApi(tenant.api_key, "GET", `/channels/${target.id}/outbox`),
        (reply) => reply.status === 200 && reply.body.data.length === 1,
        { within: "20 seconds" }
      ).pipe(Effect.tap((reply) => expect(reply.body.data[0].activity).toMatchObject({ text: "[routed] urgent: call me back" })))
    }), { timeout: 60_000 })

  it.scoped("a rule changed, disabled or deleted changes the next append's plan", () =>
    Effect.gen(function*() {
      const { conversationId, gold, origin, post, target, tenant, urgent } = yield* routedTenant
      const disabled = yield* tenantApi(tenant.api_key, "PATCH", `/routing_rules/${urgent}`, { routing_rule: { enabled: false } })
      expect(disabled.status).toBe(200)
      const first = yield* post("urgent, but the rule is off")
      const widened = yield* tenantApi(tenant.api_key, "PATCH", `/routing_rules/${urgent}`, {
        routing_rule: { enabled: true, conditions: {}, target_channel_ids: [target.id, gold.id] }
      })
      expect(widened.status).toBe(200)
      const second = yield* post("anything")
      const deleted = yield* tenantApi(tenant.api_key, "DELETE", `/routing_rules/${urgent}`)
      expect(deleted.status).toBe(204)
      const third = yield* post("urgent again")
      const planned = (activityId: string) =>
        Effect.map(deliveriesOf(conversationId), (rows) => rows.filter((row) => row.activity_id === activityId).map((row) => row.channel_id).sort())
      expect(yield* planned(first)).toEqual([origin.id])
      expect(yield* planned(second)).toEqual([origin.id, target.id, gold.id].sort())
      expect(yield* planned(third)).toEqual([origin.id])
    }), { timeout: 60_000 })
})
