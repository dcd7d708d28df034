import { describe, expect, layer } from "@effect/vitest"
import { Effect, Schedule } from "effect"
import { insertChannel, insertConversation } from "./support/Fixtures.js"
import { deliver } from "./support/LoadClient.js"
import { spawnNode } from "./support/NodeProcess.js"
import { holdConversationRow, query, serverUrl, TestDatabase } from "./support/TestDatabase.js"
import { ownerPort } from "./support/ShardOwner.js"
import { createTenant, TestNode, TestNodeLive } from "./support/TestNode.js"

/**
 * Tenant isolation where an append goes through another node: an append whose answer is lost is
 * settled by looking its idempotency key up in the conversation, and that look-up must stay
 * within the caller's tenant like every other read.
 */

const clusterEnv = {
  CLUSTER_SHARD_LOCK_EXPIRATION_MS: "4000",
  CLUSTER_ENTITY_TERMINATION_TIMEOUT_MS: "2000"
}

/**
 * A second node (the peer), a victim and an attacker tenant, and a conversation of the victim that
 * the peer owns (it takes its shards a few seconds after starting).
 */
const victimConversationOnPeer = Effect.gen(function*() {
  const db = yield* TestDatabase
  const peer = yield* spawnNode("peer", { DATABASE_URL: db.url!, DRAIN_MAX_MS: "15000", ...clusterEnv })
  const self = yield* TestNode
  const victim = yield* createTenant()
  const attacker = yield* createTenant()
  const channel = yield* insertChannel(victim.id)
  const ownedByPeer = (id: string) =>
    Effect.flatMap(ownerPort(id), (port) => (port === peer.runnerPort ? Effect.succeed(id) : Effect.fail("owned here")))
  const conversationId = yield* Effect.gen(function*() {
    const id = yield* insertConversation(victim.id, channel.id)
    yield* deliver(() => [self.baseUrl], victim.api_key, id, "warm", 0)
    return yield* ownedByPeer(id)
  }).pipe(Effect.retry({ times: 50, schedule: Schedule.spaced("200 millis") }), Effect.orDie)
  /** The owner stops answering (frozen) until the test's scope closes. */
  const freezePeer = Effect.zipRight(
    Effect.sync(() => peer.child.kill("SIGSTOP")),
    Effect.addFinalizer(() => Effect.sync(() => peer.child.kill("SIGCONT")))
  )
  /** The attacker's append to conversation `id` through this node, with an idempotency key. */
  const attackerPosts = (id: string, idempotencyKey: string) =>
    Effect.promise(() =>
      fetch(`${self.baseUrl}/api/v1/conversations/${id}/activities`, {
        method: "POST",
        headers: { "x-api-key": attacker.api_key, "x-idempotency-key": idempotencyKey, "content-type": "application/json" },
        body: JSON.stringify({ text: "probe" })
      }).then(async (r) => ({ status: r.status, text: await r.text() }))
    )
  return { self, victim, attacker, conversationId, ownedByPeer, freezePeer, attackerPosts }
})

interface ErrorBody {
  readonly error?: { readonly code?: string; readonly details?: Record<string, unknown> | null }
}

describe.skipIf(serverUrl === undefined)("tenant isolation across nodes", () => {
  layer(TestNodeLive(clusterEnv), { excludeTestServices: true })("two nodes on one database", (it) => {
    it.effect("an append to another tenant's conversation whose owner does not answer never answers with that tenant's activity", () =>
      Effect.gen(function*() {
        const { attacker, attackerPosts, conversationId, freezePeer, self, victim } = yield* victimConversationOnPeer
        const stored = yield* deliver(() => [self.baseUrl], victim.api_key, conversationId, "order-1", 0)

        // The owner stops answering; the attacker posts to the victim's conversation through this
        // node with the victim's idempotency key. Its append gets no answer in time and is settled.
        yield* freezePeer
        const reply = yield* attackerPosts(conversationId, "order-1")
        // Whatever the answer, it is not the victim's activity (nor a success for the attacker).
        expect(reply.text).not.toContain(stored.id)
        expect(reply.text).not.toContain("message order-1")
        expect(reply.status).toBe(503)
        expect((JSON.parse(reply.text) as ErrorBody).error?.code).toBe("unavailable")
        // And nothing was stored for the attacker.
        const rows = yield* query<{ n: string }>("SELECT count(*) AS n FROM activities WHERE tenant_id = $1", [attacker.id])
        expect(Number(rows[0]!.n)).toBe(0)
      }).pipe(Effect.scoped), { timeout: 120_000 })

    it.effect("another tenant's conversation is settled like an unknown one, even while a write of it is in flight", () =>
      Effect.gen(function*() {
        const { attackerPosts, conversationId, freezePeer, ownedByPeer } = yield* victimConversationOnPeer
        // An id nobody stored, owned by the peer too.
        const unknownId = yield* Effect.suspend(() => ownedByPeer(crypto.randomUUID())).pipe(
          Effect.retry({ times: 200 }),
          Effect.orDie
        )

        // A write of the victim's conversation is in flight (its row is held, its commit pending) while
        // the owner stops answering; the attacker's appends through this node are settled meanwhile.
        yield* holdConversationRow(conversationId)
        yield* freezePeer
        const [foreign, unknown] = yield* Effect.all([attackerPosts(conversationId, "k-1"), attackerPosts(unknownId, "k-1")], {
          concurrency: 2
        })
        // The victim's conversation is answered exactly as one that does not exist: its existence
        // (and that it is being written) does not show.
        const shape = (reply: { status: number; text: string }) => {
          const error = (JSON.parse(reply.text) as ErrorBody).error
          return { status: reply.status, code: error?.code, details: { ...error?.details, retry_after_ms: undefined } }
        }
        expect(shape(unknown)).toMatchObject({ status: 503, code: "unavailable" })
        expect(shape(foreign)).toEqual(shape(unknown))
      }).pipe(Effect.scoped), { timeout: 120_000 })

    it.effect("a key revoked while this node remembers it appends nothing to a conversation another node owns", () =>
      Effect.gen(function*() {
        const { conversationId, self, victim } = yield* victimConversationOnPeer
        const issued = yield* Effect.promise(() =>
          fetch(`${self.baseUrl}/api/v1/manage/api_keys`, {
            method: "POST",
            headers: { "x-api-key": victim.api_key, "content-type": "application/json" },
            body: JSON.stringify({ api_key: { name: "writer", scopes: ["write"] } })
          }).then((r) => r.json() as Promise<{ data: { id: string; key: string } }>)
        )
        // Looked up once here, the key is remembered: its next append carries it to the owner's write.
        yield* deliver(() => [self.baseUrl], issued.data.key, conversationId, "before", 0)
        const revoked = yield* Effect.promise(() =>
          fetch(`${self.baseUrl}/api/v1/manage/api_keys/${issued.data.id}`, { method: "DELETE", headers: { "x-api-key": victim.api_key } })
        )
        expect(revoked.status).toBe(204)
        const reply = yield* Effect.promise(() =>
          fetch(`${self.baseUrl}/api/v1/conversations/${conversationId}/activities`, {
            method: "POST",
            headers: { "x-api-key": issued.data.key, "content-type": "application/json" },
            body: JSON.stringify({ text: "after" })
          }).then(async (r) => ({ status: r.status, body: await r.json() as ErrorBody }))
        )
        expect(reply.status).toBe(401)
        expect(reply.body.error?.code).toBe("unauthorized")
        const rows = yield* query<{ text: string }>("SELECT text FROM activities WHERE conversation_id = $1 ORDER BY seq", [conversationId])
        expect(rows.map((row) => row.text)).toEqual(["message warm", "message before"])
      }).pipe(Effect.scoped), { timeout: 120_000 })
  })
})
