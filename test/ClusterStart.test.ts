import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Option, Schedule } from "effect"
import { connect } from "node:net"
import { networkInterfaces } from "node:os"
import Pg from "pg"
import { runnerListenHost } from "../cluster/ClusterLive.js"
import { SETUP_LOCK } from "../src/db/SetupLock.js"
import { spawnNode } from "./support/NodeProcess.js"
import { serverUrl, TestDatabase, TestDatabaseLive } from "./support/TestDatabase.js"

describe("where a runner listens", () => {
  // The runner port has no authentication: it listens on the address its peers dial, nowhere else.
  it("on its IP address as given, on a name's first address, and nowhere for a name without one", () => {
    expect(runnerListenHost("127.0.0.1", [])).toEqual(Option.some("127.0.0.1"))
    expect(runnerListenHost("::1", [])).toEqual(Option.some("::1"))
    expect(runnerListenHost("10.0.0.7", [])).toEqual(Option.some("10.0.0.7"))
    expect(runnerListenHost("fd00::7", [])).toEqual(Option.some("fd00::7"))
    expect(runnerListenHost("localhost", ["127.0.0.1"])).toEqual(Option.some("127.0.0.1"))
    expect(runnerListenHost("node-b", ["10.0.0.8"])).toEqual(Option.some("10.0.0.8"))
    expect(runnerListenHost("node-b", ["fd00::8", "10.0.0.8"])).toEqual(Option.some("fd00::8"))
    expect(runnerListenHost("node-b", [])).toEqual(Option.none())
  })
})

/** "connected", or the error code of a connection to `host:port`. */
const reach = (host: string, port: number) =>
  Effect.async<string>((resume) => {
    const socket = connect({ host, port }, () => {
      socket.destroy()
      resume(Effect.succeed("connected"))
    })
    socket.once("error", (error: NodeJS.ErrnoException) => resume(Effect.succeed(error.code ?? "error")))
  })

/** An IPv4 address of this machine other than loopback, if it has one. */
const machineAddress = Object.values(networkInterfaces()).flat().find((info) => info?.family === "IPv4" && !info.internal)?.address

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

  // Waiting for another node's setup (its migrations may take minutes) is not a statement that
  // runs too long: the setup lock and migrations are not bound by the statement timeout.
  it.live("a node waits for another's setup longer than the statement timeout, then starts", () =>
    Effect.gen(function*() {
      const db = yield* TestDatabase
      const holder = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const client = new Pg.Client({ connectionString: db.url! })
          await client.connect()
          await client.query("SELECT pg_advisory_lock($1)", [SETUP_LOCK])
          return client
        }),
        (client) => Effect.promise(() => client.end())
      )
      const starting = yield* Effect.fork(spawnNode("A", { DATABASE_URL: db.url!, DATABASE_STATEMENT_TIMEOUT_MS: "2000" }))
      // Once the node waits for the lock, it keeps waiting past its 2 s statement timeout.
      yield* Effect.promise(() =>
        holder.query("SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND NOT granted", [
          SETUP_LOCK
        ])
      ).pipe(
        Effect.filterOrFail((result) => result.rows[0].n > 0, () => "not waiting yet"),
        Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("60 seconds"))),
        Effect.orDie
      )
      yield* Effect.sleep("5 seconds")
      expect(starting.unsafePoll()).toBeNull()
      yield* Effect.promise(() => holder.query("SELECT pg_advisory_unlock($1)", [SETUP_LOCK]))
      const node = yield* Fiber.join(starting)
      expect(node.child.exitCode).toBeNull()
    }).pipe(Effect.scoped, Effect.provide(TestDatabaseLive)), 120_000)

  // Other nodes dial CLUSTER_RUNNER_HOST; an IPv6 address there was advertised while the runner
  // listened on 0.0.0.0, IPv4 only, so no peer could reach it (a global address such as fd00::2
  // fails the same way; this one exists on every machine).
  it.live("a node whose CLUSTER_RUNNER_HOST is an IPv6 address is reachable there", () =>
    Effect.gen(function*() {
      const db = yield* TestDatabase
      const host = "0:0:0:0:0:0:0:1"
      const node = yield* spawnNode("A", { DATABASE_URL: db.url!, CLUSTER_RUNNER_HOST: host })
      expect(yield* reach(host, node.runnerPort)).toBe("connected")
    }).pipe(Effect.scoped, Effect.provide(TestDatabaseLive)), 120_000)

  // Anyone who reaches the runner port can act as a node: it listened on every interface.
  it.live.skipIf(machineAddress === undefined)("a runner is reachable on its CLUSTER_RUNNER_HOST only", () =>
    Effect.gen(function*() {
      const db = yield* TestDatabase
      const node = yield* spawnNode("A", { DATABASE_URL: db.url!, CLUSTER_RUNNER_HOST: machineAddress! })
      expect(yield* reach(machineAddress!, node.runnerPort)).toBe("connected")
      expect(yield* reach("127.0.0.1", node.runnerPort)).toBe("ECONNREFUSED")
    }).pipe(Effect.scoped, Effect.provide(TestDatabaseLive)), 120_000)

  // Listening anywhere else would expose the port; the operator learns which variable to fix.
  it.live("a node whose CLUSTER_RUNNER_HOST name has no address does not start, and says why", () =>
    Effect.gen(function*() {
      const db = yield* TestDatabase
      const started = yield* Effect.exit(spawnNode("A", { DATABASE_URL: db.url!, CLUSTER_RUNNER_HOST: "parley-no-such-node.invalid" }))
      // spawnNode dies with the node's output when the process exits before it is ready.
      const output = Exit.match(started, { onFailure: Cause.pretty, onSuccess: () => "ready" })
      expect(output).toContain("exited")
      expect(output).toContain("invalid configuration: CLUSTER_RUNNER_HOST: parley-no-such-node.invalid has no address")
    }).pipe(Effect.scoped, Effect.provide(TestDatabaseLive)), 120_000)

  // A variable set to nothing takes its default (docs/configuration.md); the cluster must not read HOST itself.
  it.live("a node starts with HOST set to nothing", () =>
    Effect.gen(function*() {
      const db = yield* TestDatabase
      const node = yield* spawnNode("A", { DATABASE_URL: db.url!, HOST: "" })
      expect(node.child.exitCode).toBeNull()
    }).pipe(Effect.scoped, Effect.provide(TestDatabaseLive)), 120_000)
})
