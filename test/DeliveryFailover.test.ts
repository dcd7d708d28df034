import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { eventually } from "./support/Eventually.js"
import { insertConversation, tenantApi } from "./support/Fixtures.js"
import { createChannel } from "./support/ManageClient.js"
import { spawnNode } from "./support/NodeProcess.js"
import { ownerPort } from "./support/ShardOwner.js"
import { query, serverUrl, TestDatabase } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"
import { type Received, webhookReceiver } from "./support/WebhookReceiver.js"

const clusterEnv = {
  CLUSTER_SHARD_LOCK_EXPIRATION_MS: "4000",
  CLUSTER_ENTITY_TERMINATION_TIMEOUT_MS: "2000",
  DELIVERY_SWEEP_MS: "1000"
}

/** Appends of the burst; the owner of the channel's loop is killed after the first third. */
const BURST = 60

/** A webhook receiver on 127.0.0.1 that answers 200. */
const receiver = webhookReceiver(() => ({ status: 200 }))

/** The delivery id and the activity id of a request the receiver got. */
const idsOf = (request: Received) => ({
  delivery: String(request.headers["x-chat-delivery-id"]),
  activity: (JSON.parse(request.body.toString("utf8")) as { id: string }).id
})

describe.skipIf(serverUrl === undefined)("delivery across nodes", () => {
  layer(TestNodeLive(clusterEnv), { excludeTestServices: true })("this node and two node processes", (it) => {
    it.scoped("kill -9 of the node running a channel's delivery loop mid-burst: every delivery arrives, duplicates keep their delivery id", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase
        const hook = yield* receiver
        const env = { DATABASE_URL: db.url!, ...clusterEnv }
        const [a, b] = yield* Effect.all([spawnNode("A", env), spawnNode("B", env)], { concurrency: 2 })
        const tenant = yield* createTenant()
        const retryPolicy = { max_attempts: 20, backoff: "fixed", base_ms: 200, max_ms: 200, timeout_ms: 2000 }
        // A channel whose loop runs on A: channels are made until the shard of one is A's (once shards settled).
        const channel = yield* eventually(
          Effect.gen(function*() {
            const made = yield* createChannel(tenant.api_key, { config: { url: hook.url }, retry_policy: retryPolicy })
            return { made, owner: yield* ownerPort(made.id) }
          }),
          ({ owner }) => owner === a.runnerPort,
          { within: "90 seconds" }
        )
        const conversationId = yield* insertConversation(tenant.id, channel.made.id)
        const posted: Array<string> = []
        for (let i = 0; i < BURST; i++) {
          if (i === BURST / 3) {
            a.child.kill("SIGKILL")
            yield* Effect.promise(() => a.exited)
          }
          const reply = yield* tenantApi(tenant.api_key, "POST", `/conversations/${conversationId}/activities`, {
            text: `burst ${i}`
          }, { "x-idempotency-key": `burst-${i}` })
          // The conversation's own owner may have been A as well: its move answers 503 for a while.
          if (reply.status === 503) {
            i--
            yield* Effect.sleep("200 millis")
            continue
          }
          expect(reply.status).toBe(201)
          posted.push(reply.body.data.id as string)
        }

        const rows = yield* query<{ id: string; activity_id: string }>(
          `SELECT id, activity_id FROM deliveries WHERE channel_id = $1`,
          [channel.made.id]
        )
        expect(rows.map((row) => row.activity_id).sort()).toEqual([...posted].sort())
        const deliveryOf = new Map(rows.map((row) => [row.activity_id, row.id]))
        // At least once: every activity reached the receiver, however long the dead owner's leases last.
        yield* eventually(
          Effect.sync(() => posted.filter((id) => !hook.received.some((r) => idsOf(r).activity === id))),
          (missing) => missing.length === 0,
          { within: "120 seconds" }
        )
        // Every request of an activity, first or repeated, carried that activity's one delivery id.
        for (const { activity, delivery } of hook.received.map(idsOf)) expect(delivery).toBe(deliveryOf.get(activity))
        // One the dead owner sent but never recorded is sent again, and recorded, once its lease ends
        // (the policy's timeout per round plus 30 s after its claim): a minute and a half leaves room.
        const sent = yield* eventually(
          query<{ n: number }>(`SELECT count(*)::int AS n FROM deliveries WHERE channel_id = $1 AND status = 'sent'`, [channel.made.id]),
          (counted) => counted[0]!.n === BURST,
          { within: "90 seconds" }
        )
        expect(sent[0]!.n).toBe(BURST)
        expect(b.child.exitCode).toBeNull()
      }), { timeout: 300_000 })
  })
})
