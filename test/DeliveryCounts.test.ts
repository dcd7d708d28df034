import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { insertDelivery } from "./support/DeliveryFixtures.js"
import { eventually } from "./support/Eventually.js"
import { insertChannel, insertConversation } from "./support/Fixtures.js"
import { createTenant, request, TestNodeLive } from "./support/TestNode.js"

/** The sample lines of `parley_deliveries_stored` in a scrape, sorted. */
const storedSamples = Effect.map(
  request("GET", "/metrics"),
  (reply) => String(reply.body).split("\n").filter((line) => line.startsWith("parley_deliveries_stored{")).sort()
)

const sample = (status: string, channelType: string, count: number) =>
  `parley_deliveries_stored{status="${status}",channel_type="${channelType}"} ${count}`

// Counted every second; no sweep within the test, so the rows written directly stay as written.
layer(TestNodeLive({ DELIVERY_COUNT_MS: "1000", DELIVERY_SWEEP_MS: "3600000" }), { excludeTestServices: true })(
  "stored deliveries in /metrics",
  (it) => {
    it.effect("pending and failed deliveries by channel type, from the last count; sent ones are not counted", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const webhook = yield* insertChannel(tenant.id, { type: "webhook" })
        const nats = yield* insertChannel(tenant.id, { type: "nats" })
        const onWebhook = { tenantId: tenant.id, channelId: webhook.id, conversationId: yield* insertConversation(tenant.id, webhook.id) }
        const onNats = { tenantId: tenant.id, channelId: nats.id, conversationId: yield* insertConversation(tenant.id, nats.id) }
        for (const status of ["pending", "pending", "failed", "sent", "delivered", "read"]) yield* insertDelivery(onWebhook, { status })
        for (const status of ["failed", "failed", "failed", "sent"]) yield* insertDelivery(onNats, { status })

        const samples = yield* eventually(storedSamples, (lines) => lines.includes(sample("failed", "nats", 3)), {
          what: "a count with the new rows"
        })
        expect(samples).toContain(sample("pending", "webhook", 2))
        expect(samples).toContain(sample("failed", "webhook", 1))
        expect(samples).toContain(sample("pending", "nats", 0))
        // Every channel type and counted status is shown, 0 where none is stored.
        expect(samples).toContain(sample("pending", "echo", 0))
        expect(samples).toHaveLength(14)
        expect(samples.some((line) => /status="(sent|delivered|read)"/.test(line))).toBe(false)
      }))
  }
)
