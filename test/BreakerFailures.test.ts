import { expect, layer } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import { DeliverySenders, Outcome } from "../src/delivery/DeliverySender.js"
import { ChannelSecrets } from "../src/channels/ChannelSecrets.js"
import { makeDeliveryLoop } from "../src/delivery/DeliveryLoop.js"
import { DeliveryMetrics } from "../src/delivery/DeliveryMetrics.js"
import type { DeliverySettings } from "../src/delivery/DeliverySettings.js"
import { Metrics } from "../src/ops/Metrics.js"
import { insertDelivery } from "./support/DeliveryFixtures.js"
import { insertChannel, insertConversation, tenantApi } from "./support/Fixtures.js"
import { query } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

/** One delivery a turn; the breaker opens at the third consecutive failure and stays open for an hour. */
const SETTINGS: DeliverySettings = {
  batchSize: 1,
  concurrency: 1,
  sweepMs: 3_600_000,
  countMs: 3_600_000,
  breaker: { failureThreshold: 3, coolDownMs: 3_600_000 }
}

/** A receiver that is down: every attempt is a retryable failure. */
const ReceiverDown = Layer.succeed(DeliverySenders, {
  forType: () => ({ send: () => Effect.succeed(Outcome.Retry({ afterMs: Option.none(), error: "receiver down" })) })
})

/** The loop's services beside the node's database; metrics of their own, as the node registered its own. */
const LoopServices = Layer.mergeAll(ReceiverDown, DeliveryMetrics.Default.pipe(Layer.provide(Metrics.Default)), ChannelSecrets.Default)

/**
 * One owner of the channel's loop, as its entity runs it: it takes `turns` turns and ends, as a move
 * or a passivation ends it. The next owner is a new loop.
 */
const owner = (channelId: string, turns: number) =>
  Effect.scoped(Effect.gen(function*() {
    const loop = yield* makeDeliveryLoop(channelId, SETTINGS)
    for (let i = 0; i < turns; i++) expect((yield* loop.turn)._tag).toBe("worked")
  })).pipe(Effect.provide(LoopServices))

const storedBreaker = (channelId: string) =>
  Effect.map(
    query<{ circuit_state: string; circuit_failures: number }>(
      `SELECT circuit_state, circuit_failures FROM channels WHERE id = $1`,
      [channelId]
    ),
    (rows) => rows[0]
  )

// No sweep within the test, and the deliveries are written directly: no wake starts the node's own loop.
layer(TestNodeLive({ DELIVERY_SWEEP_MS: "3600000" }), { excludeTestServices: true })("the breaker's count across owners", (it) => {
  it.effect("a channel that failed twice under one owner opens at its third failure under the next; a resume forgets the count", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id, { type: "email" })
      const conversationId = yield* insertConversation(tenant.id, channel.id)
      // Failed deliveries are due again only in a minute: each turn takes the next new one.
      yield* query(`UPDATE channels SET retry_policy = $2 WHERE id = $1`, [
        channel.id,
        JSON.stringify({ max_attempts: 50, backoff: "fixed", base_ms: 60_000, max_ms: 60_000, timeout_ms: 2000 })
      ])
      for (let i = 0; i < 3; i++) yield* insertDelivery({ tenantId: tenant.id, channelId: channel.id, conversationId })

      yield* owner(channel.id, 2)
      expect(yield* storedBreaker(channel.id)).toEqual({ circuit_state: "closed", circuit_failures: 2 })
      yield* owner(channel.id, 1)
      expect(yield* storedBreaker(channel.id)).toEqual({ circuit_state: "open", circuit_failures: 0 })

      // A failure stored before a resume does not count towards the next opening.
      yield* query(`UPDATE channels SET circuit_state = 'closed', circuit_failures = 2 WHERE id = $1`, [channel.id])
      expect((yield* tenantApi(tenant.api_key, "POST", `/channels/${channel.id}/resume`)).status).toBe(200)
      expect(yield* storedBreaker(channel.id)).toEqual({ circuit_state: "closed", circuit_failures: 0 })
    }))
})
