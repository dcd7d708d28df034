import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { ConversationCores } from "../src/conversations/ConversationCores.js"
import { insertChannel, insertConversation, tenantApi } from "./support/Fixtures.js"
import { eventually } from "./support/Eventually.js"
import { spawnNode } from "./support/NodeProcess.js"
import { ownerPort } from "./support/ShardOwner.js"
import { serverUrl, TestDatabase } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

const clusterEnv = {
  CLUSTER_SHARD_LOCK_EXPIRATION_MS: "4000",
  CLUSTER_ENTITY_TERMINATION_TIMEOUT_MS: "2000",
  // The owner (this process's node) ends each listener's stream after about 2 s, and interrupts
  // one still open a second later.
  CLUSTER_STREAM_LIFETIME_MS: "2000"
}

describe.skipIf(serverUrl === undefined)("listener streams across nodes", () => {
  layer(TestNodeLive(clusterEnv), { excludeTestServices: true })("an owner and a listening node", (it) => {
    it.scoped("the streams of a listening node killed with SIGKILL end on the owner, idle or with an activity in flight", () =>
      Effect.gen(function*() {
        const db = yield* TestDatabase
        const cores = yield* ConversationCores
        const tenant = yield* createTenant()
        const channel = yield* insertChannel(tenant.id)
        const ids = yield* Effect.forEach(Array.from({ length: 12 }), () => insertConversation(tenant.id, channel.id))
        const listener = yield* spawnNode("L", { DATABASE_URL: db.url!, ...clusterEnv, LISTEN_TO: ids.join(",") }, "test/support/ListenerNode.ts")
        const seen = (id: string, seq: number) => listener.output().includes(`seen ${id} ${seq}\n`)
        // One activity each, through this node, reaches the listening node: its streams are live. The
        // waits leave room for a host loaded by the rest of the suite (a listener process then starts slowly).
        // Shards move to the new node meanwhile: a 503 (retry later) is posted again.
        yield* Effect.forEach(ids, (id) =>
          eventually(
            tenantApi(tenant.api_key, "POST", `/conversations/${id}/activities`, { text: "one" }, { "x-idempotency-key": "one" }),
            (reply) => reply.status === 201,
            { within: "60 seconds" }
          ))
        yield* eventually(Effect.sync(() => ids.filter((id) => !seen(id, 1))), (missing) => missing.length === 0, { within: "60 seconds" })
        // The conversations this node owns, each followed from the listening node (and none of
        // ours from here: this process's hub has no listeners). Shards move to the new node for a
        // while after it starts: looked up until every shard is held and the counts agree.
        const { ours } = yield* eventually(
          Effect.gen(function*() {
            const owners = yield* Effect.forEach(ids, ownerPort)
            return {
              settled: owners.every((port) => Number.isInteger(port) && port > 0),
              ours: ids.filter((_, i) => owners[i] !== listener.runnerPort),
              open: cores.streams()
            }
          }),
          ({ open, ours, settled }) => settled && ours.length > 0 && open === ours.length,
          { within: "60 seconds" }
        )
        // Streams have ended and been followed again meanwhile: a second activity each still arrives.
        yield* Effect.sleep("2500 millis")
        yield* Effect.forEach(ids, (id) => tenantApi(tenant.api_key, "POST", `/conversations/${id}/activities`, { text: "two" }))
        yield* eventually(Effect.sync(() => ids.filter((id) => !seen(id, 2))), (missing) => missing.length === 0, { within: "60 seconds" })

        listener.child.kill("SIGKILL")
        yield* Effect.promise(() => listener.exited)
        // One of them gets an activity now: its stream sends it to the dead node and waits for an
        // acknowledgement that never comes. The others stay idle.
        const reply = yield* tenantApi(tenant.api_key, "POST", `/conversations/${ours[0]}/activities`, { text: "three" })
        expect(reply.status).toBe(201)
        // Within a lifetime (2.2 s at most) and the second after it, with room for a slow host.
        yield* eventually(Effect.sync(cores.streams), (open) => open === 0, { within: "30 seconds" })
      }), { timeout: 180_000 })
  })
})
