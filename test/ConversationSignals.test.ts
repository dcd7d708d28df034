import { describe, expect, layer } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Exit, Layer, Scope, Stream } from "effect"
import { Sharding } from "@effect/cluster"
import { ConversationSignalsEntity } from "../cluster/ConversationSignalsEntity.js"
import { ConversationSignalsLive } from "../cluster/ConversationSignalsLive.js"
import { AppConfig } from "../src/config/AppConfig.js"
import { ReadPositions } from "../src/conversations/ReadPositions.js"
import { ConversationId } from "../src/domain/Conversation.js"
import { LeanAppendRoute } from "../src/http/AppendRoute.js"
import { LoggingLive, NodeLive } from "../src/NodeLive.js"
import { ConversationSignals, type Signal } from "../src/realtime/ConversationSignals.js"
import { eventually } from "./support/Eventually.js"
import { ownerPort } from "./support/ShardOwner.js"
import { serverUrl, TestDatabase } from "./support/TestDatabase.js"
import { ADMIN_TOKEN, freePorts, TestNodeLive } from "./support/TestNode.js"

const clusterEnv = {
  CLUSTER_SHARD_LOCK_EXPIRATION_MS: "4000",
  CLUSTER_ENTITY_TERMINATION_TIMEOUT_MS: "1000"
}

const newConversation = () => ConversationId.to.make(crypto.randomUUID())

/** Everything `stream` delivers while the test's scope is open, as it arrives. */
const collect = (stream: Stream.Stream<Signal>) =>
  Effect.gen(function*() {
    const seen: Array<Signal> = []
    yield* Effect.forkScoped(Stream.runForEach(stream, (signal) => Effect.sync(() => seen.push(signal))))
    return seen
  })

const presences = (seen: ReadonlyArray<Signal>) =>
  seen.flatMap((signal) => (signal._tag === "Presence" ? [signal.viewers] : []))
const lastPresence = (seen: ReadonlyArray<Signal>) => presences(seen).at(-1)

/**
 * A second whole node in this process, on the same database as the file's node: its own ports, runner
 * and services. Its signals, to be closed with `scope` (the way a dead node stops renewing its leases).
 */
const secondNode = (scope: Scope.Scope, runnerPort: number) =>
  Effect.gen(function*() {
    const db = yield* TestDatabase
    const [port] = yield* freePorts(1)
    const provider = ConfigProvider.fromMap(
      new Map(Object.entries({
        PORT: String(port),
        CLUSTER_RUNNER_PORT: String(runnerPort),
        HOST: "127.0.0.1",
        DATA_DIR: db.dataDir,
        ADMIN_API_TOKEN: ADMIN_TOKEN,
        DRAIN_REFUSE_MS: "0",
        LOG_LEVEL: "none",
        DATABASE_URL: db.url!,
        ...clusterEnv
      }))
    )
    const context = yield* Layer.buildWithScope(
      NodeLive.pipe(
        Layer.provide(LoggingLive),
        Layer.provide(AppConfig.Default),
        Layer.provide(Layer.succeed(LeanAppendRoute, true)),
        Layer.provide(Layer.setConfigProvider(provider))
      ),
      scope
    )
    return Context.get(context, ConversationSignals)
  })

/**
 * The node's signals over a cluster where `Publish` calls to signals entities never answer, as when
 * the owner is unreachable; every other call is the real one.
 */
const signalsWithSilentPublish = Effect.map(
  Layer.build(ConversationSignalsLive.pipe(Layer.provide(Layer.effect(
    Sharding.Sharding,
    Effect.map(Sharding.Sharding, (sharding) =>
      Sharding.Sharding.of({
        ...sharding,
        makeClient: (entity) =>
          Effect.map(sharding.makeClient(entity), (client) => (entityId: string) =>
            new Proxy(client(entityId), {
              get: (target, key, receiver) =>
                entity.type === ConversationSignalsEntity.type && key === "Publish" ? () => Effect.never : Reflect.get(target, key, receiver)
            }))
      }))
  )))),
  (context) => Context.get(context, ConversationSignals)
)

layer(TestNodeLive(clusterEnv), { excludeTestServices: true })("conversation signals", (it) => {
  it.scoped("a typing reaches every follower of the conversation, with the connection it came from", () =>
    Effect.gen(function*() {
      const signals = yield* ConversationSignals
      const id = newConversation()
      const a = yield* collect(signals.follow(id))
      const b = yield* collect(signals.follow(id))
      const elsewhere = yield* collect(signals.follow(newConversation()))
      // Typing is ephemeral: one sent before the node's upstream is in place is lost, so send until one arrives.
      yield* eventually(
        Effect.zipRight(signals.typing(id, "u1", "conn-a"), Effect.sync(() => b.filter((s) => s._tag === "Typing"))),
        (typings) => typings.length > 0
      )
      // The origin's own listener recognizes its signal by `origin` and drops it (the bindings do).
      expect(b.find((s) => s._tag === "Typing")).toMatchObject({ _tag: "Typing", userId: "u1", origin: "conn-a" })
      yield* eventually(Effect.sync(() => a.filter((s) => s._tag === "Typing")), (typings) => typings.length > 0)
      expect(a.find((s) => s._tag === "Typing")).toMatchObject({ userId: "u1", origin: "conn-a" })
      expect(elsewhere.filter((s) => s._tag === "Typing")).toEqual([])
    }), { timeout: 60_000 })

  it.scoped("viewers join and leave: followers hear the viewers, and viewers() answers them", () =>
    Effect.gen(function*() {
      const signals = yield* ConversationSignals
      const id = newConversation()
      const seen = yield* collect(signals.follow(id))
      const first = yield* Scope.make()
      yield* Scope.extend(signals.view(id, "u1"), first)
      const second = yield* Scope.make()
      yield* Scope.extend(signals.view(id, "u2"), second)
      // Two views of one user count once; closing one of them leaves the user present.
      const again = yield* Scope.make()
      yield* Scope.extend(signals.view(id, "u1"), again)
      yield* eventually(Effect.sync(() => lastPresence(seen)), (viewers) => JSON.stringify(viewers) === JSON.stringify(["u1", "u2"]))
      expect(yield* signals.viewers(id)).toEqual(["u1", "u2"])
      yield* Scope.close(again, Exit.void)
      yield* Scope.close(second, Exit.void)
      yield* eventually(Effect.sync(() => lastPresence(seen)), (viewers) => JSON.stringify(viewers) === JSON.stringify(["u1"]))
      yield* Scope.close(first, Exit.void)
      yield* eventually(Effect.sync(() => lastPresence(seen)), (viewers) => viewers !== undefined && viewers.length === 0)
      expect(yield* signals.viewers(id)).toEqual([])
      // Each change once: no repeats of the same viewers in a row.
      const all = presences(seen).map((viewers) => JSON.stringify(viewers))
      expect(all.filter((viewers, i) => i > 0 && viewers === all[i - 1])).toEqual([])
    }), { timeout: 60_000 })

  it.scoped("a read position only moves forward, and each read is broadcast with the stored position", () =>
    Effect.gen(function*() {
      const signals = yield* ConversationSignals
      const positions = yield* ReadPositions
      const id = newConversation()
      const seen = yield* collect(signals.follow(id))
      const reads = () => seen.flatMap((s) => (s._tag === "Read" ? [s] : []))
      // Until the upstream is in place, a read is stored and its broadcast may be lost: read until one arrives.
      yield* eventually(Effect.zipRight(signals.read(id, "reader", 5, "conn-r"), Effect.sync(reads)), (r) => r.length > 0)
      const before = reads().length
      // Behind the stored position: it stays, and the broadcast says where the reader really is.
      yield* signals.read(id, "reader", 3, "conn-r")
      yield* eventually(Effect.sync(() => reads().length), (count) => count > before)
      expect(reads().map((r) => r.seq)).toEqual(reads().map(() => 5))
      expect(reads().at(-1)).toMatchObject({ userId: "reader", seq: 5, origin: "conn-r" })
      expect(yield* positions.positionOf(id, "reader")).toBe(5)
      yield* signals.read(id, "reader", 9, "conn-r")
      yield* eventually(Effect.sync(() => reads().at(-1)?.seq), (seq) => seq === 9)
      expect(yield* positions.positionOf(id, "reader")).toBe(9)
      const malformed = yield* Effect.flip(signals.read(id, "reader", -1, "conn-r"))
      expect(malformed._tag).toBe("BadRequest")
    }), { timeout: 60_000 })

  it.scoped("with the entity unreachable, a read is stored and answers Unavailable; a typing is dropped", () =>
    Effect.gen(function*() {
      const signals = yield* signalsWithSilentPublish
      const positions = yield* ReadPositions
      const id = newConversation()
      const error = yield* Effect.flip(signals.read(id, "reader", 7, "conn-r"))
      expect(error).toMatchObject({ _tag: "Unavailable", reason: "cluster_unavailable" })
      expect(yield* positions.positionOf(id, "reader")).toBe(7)
      yield* signals.typing(id, "typist", "conn-t")
    }), { timeout: 60_000 })

  it.scoped("a node that stops renewing its lease drops out of presence; the others' viewers stay", () =>
    Effect.gen(function*() {
      const signals = yield* ConversationSignals
      const entity = yield* ConversationSignalsEntity.client
      const id = newConversation()
      const seen = yield* collect(signals.follow(id))
      yield* signals.view(id, "alive")
      // A node that reports once and is then killed: nothing renews its lease again.
      yield* entity(id).Present({ node: "ghost-node", version: 1, viewers: ["ghost"], leaseMs: 6000 })
      yield* eventually(Effect.sync(() => lastPresence(seen)), (viewers) => JSON.stringify(viewers) === JSON.stringify(["alive", "ghost"]))
      yield* eventually(Effect.sync(() => lastPresence(seen)), (viewers) => JSON.stringify(viewers) === JSON.stringify(["alive"]))
      expect(yield* signals.viewers(id)).toEqual(["alive"])
    }), { timeout: 60_000 })

  it.scoped("a lone node's lease expires by the entity's sweep, with no other report to notice it", () =>
    Effect.gen(function*() {
      const signals = yield* ConversationSignals
      const entity = yield* ConversationSignalsEntity.client
      const id = newConversation()
      const seen = yield* collect(signals.follow(id))
      // Longer than the entity's warm-up, so the viewer is announced before the lease runs out.
      yield* entity(id).Present({ node: "ghost-node", version: 1, viewers: ["ghost"], leaseMs: 6000 })
      yield* eventually(Effect.sync(() => lastPresence(seen)), (viewers) => JSON.stringify(viewers) === JSON.stringify(["ghost"]))
      yield* eventually(Effect.sync(() => lastPresence(seen)), (viewers) => viewers !== undefined && viewers.length === 0)
    }), { timeout: 60_000 })

  describe.skipIf(serverUrl === undefined)("with a second node on the same database", () => {
    it.scoped("typing, reads and presence cross nodes; a stopped node's viewers drop out, wherever the entity was", () =>
      Effect.gen(function*() {
        const here = yield* ConversationSignals
        const otherScope = yield* Scope.make()
        const [otherPort] = yield* freePorts(1)
        const there = yield* secondNode(otherScope, otherPort!)
        // One conversation whose entity lives on each node (shards move to the new node for a while).
        const ids = Array.from({ length: 16 }, newConversation)
        const owners = yield* eventually(
          Effect.forEach(ids, ownerPort),
          (ports) => ports.every((port) => Number.isInteger(port) && port > 0) && ports.includes(otherPort!) && ports.some((port) => port !== otherPort),
          { within: "60 seconds" }
        )
        const onThisNode = ids[owners.findIndex((port) => port !== otherPort)]!
        const onOtherNode = ids[owners.indexOf(otherPort!)]!
        for (const id of [onThisNode, onOtherNode]) {
          const heardHere = yield* collect(here.follow(id))
          const heardThere = yield* collect(there.follow(id))
          yield* eventually(
            Effect.zipRight(there.typing(id, "far", "conn-far"), Effect.sync(() => heardHere.filter((s) => s._tag === "Typing"))),
            (typings) => typings.length > 0
          )
          yield* eventually(
            Effect.zipRight(here.read(id, "near", 4, "conn-near"), Effect.sync(() => heardThere.filter((s) => s._tag === "Read"))),
            (reads) => reads.length > 0
          )
          yield* here.view(id, "near")
          // Its view outlives the node: the node stops, as a killed one does, without reporting a leave.
          yield* Scope.extend(there.view(id, "far"), yield* Scope.make())
          yield* eventually(Effect.sync(() => lastPresence(heardHere)), (viewers) => JSON.stringify(viewers) === JSON.stringify(["far", "near"]))
          yield* eventually(Effect.sync(() => lastPresence(heardThere)), (viewers) => JSON.stringify(viewers) === JSON.stringify(["far", "near"]))
        }
        const heard = yield* Effect.forEach([onThisNode, onOtherNode], (id) => collect(here.follow(id)))
        yield* Scope.close(otherScope, Exit.void)
        // On this node the entity stays and the lease runs out (6 s and a sweep); the other node's
        // entity moves here and is rebuilt from this node's renewals. Generous for a slow host.
        for (const seen of heard) {
          yield* eventually(Effect.sync(() => lastPresence(seen)), (viewers) => JSON.stringify(viewers) === JSON.stringify(["near"]), {
            within: "60 seconds"
          })
        }
      }), { timeout: 120_000 })

    it.scoped("when a conversation's entity moves to a new node, followers hear no change and no repeat of the viewers", () =>
      Effect.gen(function*() {
        const here = yield* ConversationSignals
        const [secondPort, thirdPort] = yield* freePorts(2)
        const there = yield* secondNode(yield* Effect.scope, secondPort!)
        const ids = Array.from({ length: 16 }, newConversation)
        const heard = yield* Effect.forEach(ids, (id) => collect(here.follow(id)))
        for (const id of ids) {
          yield* here.view(id, "near")
          yield* there.view(id, "far")
        }
        yield* eventually(
          Effect.sync(() => heard.map(lastPresence)),
          (last) => last.every((viewers) => JSON.stringify(viewers) === JSON.stringify(["far", "near"])),
          { within: "60 seconds" }
        )
        const before = heard.map((seen) => seen.length)
        // A third node takes some shards over: their entities start again there, from the nodes' renewals.
        yield* secondNode(yield* Effect.scope, thirdPort!)
        const owners = yield* eventually(
          Effect.forEach(ids, ownerPort),
          (ports) => ports.every((port) => Number.isInteger(port) && port > 0) && ports.includes(thirdPort!),
          { within: "60 seconds" }
        )
        // Past the new entities' warm-up and a few renewals and sweeps.
        yield* Effect.sleep("8 seconds")
        const moved = ids.flatMap((_, i) => (owners[i] === thirdPort ? [heard[i]!.slice(before[i])] : []))
        expect(moved.length).toBeGreaterThan(0)
        expect(moved.map(presences)).toEqual(moved.map(() => []))
      }), { timeout: 180_000 })
  })
})
