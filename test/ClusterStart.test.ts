import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawnNode } from "./support/NodeProcess.js"
import { serverUrl, TestDatabase, TestDatabaseLive } from "./support/TestDatabase.js"

describe.skipIf(serverUrl === undefined)("cluster start", () => {
  // Each node creates the cluster's tables and types on a new database; without a lock, one of
  // several nodes starting at once could fail on a type another had just created.
  it.live("three nodes started together on a new database all become ready", () =>
    Effect.gen(function*() {
      const db = yield* TestDatabase
      const env = { DATABASE_URL: db.url!, CLUSTER_SHARD_LOCK_EXPIRATION_MS: "4000" }
      const nodes = yield* Effect.all(["A", "B", "C"].map((name) => spawnNode(name, env)), { concurrency: "unbounded" })
      const answers = yield* Effect.forEach(nodes, (node) =>
        Effect.promise(() => fetch(`${node.baseUrl}/health/ready`).then((r) => r.status)))
      expect(answers).toEqual([200, 200, 200])
      for (const node of nodes) expect(node.child.exitCode).toBeNull()
    }).pipe(Effect.scoped, Effect.provide(TestDatabaseLive)), 120_000)
})
