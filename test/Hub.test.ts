import { expect, layer } from "@effect/vitest"
import { Chunk, Context, Deferred, Effect, Fiber, HashMap, Layer, Logger, LogLevel, Schema, Stream } from "effect"
import type { Activity } from "../src/domain/Activity.js"
import { ConversationId } from "../src/domain/Conversation.js"
import { LIVE_BUFFER } from "../src/conversations/SeqFollower.js"
import { ConversationHub } from "../src/realtime/ConversationHub.js"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { query } from "./support/TestDatabase.js"
import { admin, TestNodeLive } from "./support/TestNode.js"
import { overrideConversationCall } from "./support/EntityCallOverride.js"
import { eventually } from "./support/Eventually.js"

/** One Subscribe call to a conversation entity: where it started and the seqs it delivered. */
interface Upstream {
  readonly fromSeq: number
  readonly delivered: Array<number>
}

type SubscribeStream = Stream.Stream<Activity, unknown>

/**
 * The node's cluster, except that the first Subscribe stream to a conversation entity is what
 * `first` makes of a real one (`again` subscribes anew with the same payload, as a crash re-send
 * does). Every Subscribe the hub makes is recorded, with what it delivered.
 */
const FirstSubscribe = (upstreams: Array<Upstream>, first: (again: () => SubscribeStream) => SubscribeStream) =>
  overrideConversationCall("Subscribe", (client) => (payload: { readonly fromSeq: number }) => {
    const upstream: Upstream = { fromSeq: payload.fromSeq, delivered: [] }
    upstreams.push(upstream)
    const again = () => client.Subscribe(payload).pipe(Stream.tap((activity) => Effect.sync(() => upstream.delivered.push(activity.seq))))
    return upstreams.length === 1 ? first(again) : again()
  })

/** A hub of its own, over a cluster whose first Subscribe stream is `first`'s. */
const hubWithFirstSubscribe = (upstreams: Array<Upstream>, first: (again: () => SubscribeStream) => SubscribeStream) =>
  Effect.map(
    Layer.build(ConversationHub.Default.pipe(Layer.provide(FirstSubscribe(upstreams, first)))),
    (context) => Context.get(context, ConversationHub)
  )

/** Waits until `done` holds, looking every 100 ms for up to 30 s; then dies naming `what`. */
const until = (what: string, done: () => boolean) => eventually(Effect.sync(done), (ok) => ok, { what: `still waiting for ${what}` })

layer(TestNodeLive(), { excludeTestServices: true })("node-local hub", (it) => {
  it.effect("a listener gets stored history from its watermark, then live activities in order", () =>
    Effect.gen(function*() {
      const hub = yield* ConversationHub
      const { conversationId, key } = yield* tenantWithConversation
      const path = `/conversations/${conversationId}/activities`
      for (let i = 1; i <= 3; i++) yield* tenantApi(key, "POST", path, { text: `m${i}` })
      const listener = yield* hub.subscribe(conversationId, 1).pipe(Stream.take(6), Stream.runCollect, Effect.fork)
      const second = yield* hub.subscribe(conversationId, 0).pipe(Stream.take(7), Stream.runCollect, Effect.fork)
      yield* Effect.sleep("200 millis")
      for (let i = 4; i <= 7; i++) yield* tenantApi(key, "POST", path, { text: `m${i}` })
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(listener))
      expect(seen.map((a) => a.seq)).toEqual([2, 3, 4, 5, 6, 7])
      expect(seen.map((a) => a.text)).toEqual(["m2", "m3", "m4", "m5", "m6", "m7"])
      expect(Chunk.toReadonlyArray(yield* Fiber.join(second)).map((a) => a.seq)).toEqual([1, 2, 3, 4, 5, 6, 7])
    }))

  it.effect("a conversation whose last listener left is followed again by the next one, in any spelling", () =>
    Effect.gen(function*() {
      const hub = yield* ConversationHub
      const { conversationId, key } = yield* tenantWithConversation
      const path = `/conversations/${conversationId}/activities`
      yield* tenantApi(key, "POST", path, { text: "first" })
      const once = yield* hub.subscribe(conversationId, 0).pipe(Stream.take(1), Stream.runCollect)
      expect(Chunk.toReadonlyArray(once).map((a) => a.text)).toEqual(["first"])
      // However the id is spelled, once decoded: the same topic, following the same entity.
      const next = yield* hub.subscribe(Schema.decodeSync(ConversationId)(conversationId.toUpperCase()), 1).pipe(Stream.take(1), Stream.runCollect, Effect.fork)
      yield* Effect.sleep("200 millis")
      yield* tenantApi(key, "POST", path, { text: "second" })
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(next).pipe(Effect.timeout("10 seconds")))
      expect(seen.map((a) => [a.seq, a.text])).toEqual([[2, "second"]])
    }))

  it.effect("an activity the upstream never announces reaches listeners through the gap check", () =>
    Effect.gen(function*() {
      const hub = yield* ConversationHub
      const { conversationId, key, tenant } = yield* tenantWithConversation
      const path = `/conversations/${conversationId}/activities`
      yield* tenantApi(key, "POST", path, { text: "announced" })
      const listener = yield* hub.subscribe(conversationId, 0).pipe(Stream.take(2), Stream.runCollect, Effect.fork)
      yield* Effect.sleep("200 millis")
      // Committed behind the entity's back, as a write whose announcement was lost would be.
      yield* query(
        `INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text)
         VALUES ($1, 2, $2, $3, 'message', 'user', 'silent')`,
        [conversationId, crypto.randomUUID(), tenant.id]
      )
      yield* query("UPDATE conversations SET head_seq = 2 WHERE id = $1", [conversationId])
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(listener).pipe(Effect.timeout("10 seconds")))
      expect(seen.map((a) => [a.seq, a.text])).toEqual([[1, "announced"], [2, "silent"]])
    }))

  it.effect("a listener slower than the live buffer still gets every activity once, in order", () =>
    Effect.gen(function*() {
      const hub = yield* ConversationHub
      const { conversationId, key, tenant } = yield* tenantWithConversation
      yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { limits: { activity_create: { limit: 100000, scale_ms: 1000 } } } })
      const total = LIVE_BUFFER + 200
      const gate = yield* Deferred.make<void>()
      // Holds its first activity until every append is done: the rest overflow the live buffer.
      const listener = yield* hub.subscribe(conversationId, 0).pipe(
        Stream.tap(() => Deferred.await(gate)),
        Stream.take(total),
        Stream.runCollect,
        Effect.fork
      )
      yield* Effect.sleep("200 millis")
      const path = `/conversations/${conversationId}/activities`
      yield* Effect.forEach(Array.from({ length: total }, (_, i) => i + 1), (i) =>
        Effect.flatMap(tenantApi(key, "POST", path, { text: `m${i}` }), (reply) =>
          Effect.sync(() => expect(reply.status).toBe(201))), { concurrency: 16, discard: true })
      yield* Deferred.succeed(gate, undefined)
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(listener).pipe(Effect.timeout("30 seconds")))
      expect(seen.map((a) => a.seq)).toEqual(Array.from({ length: total }, (_, i) => i + 1))
    }), 60_000)

  it.effect("an upstream that goes silent is restarted from what the topic published, and live activities flow through the new one", () =>
    Effect.gen(function*() {
      const upstreams: Array<Upstream> = []
      // The first Subscribe never delivers anything, as a crash re-send that never resumed.
      const hub = yield* hubWithFirstSubscribe(upstreams, () => Stream.never)
      const { conversationId, key } = yield* tenantWithConversation
      const path = `/conversations/${conversationId}/activities`
      const listener = yield* hub.subscribe(conversationId, 0).pipe(Stream.take(2), Stream.runCollect, Effect.fork)
      yield* until("the first subscribe", () => upstreams.length === 1)
      // Only the gap check can bring this one; the check after it finds it still unannounced.
      yield* tenantApi(key, "POST", path, { text: "m1" })
      yield* until("the silent upstream to be restarted", () => upstreams.length >= 2)
      expect(upstreams[1]!.fromSeq).toBe(1)
      yield* tenantApi(key, "POST", path, { text: "m2" })
      yield* until("m2 through the new upstream", () => upstreams[1]!.delivered.includes(2))
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(listener).pipe(Effect.timeout("30 seconds")))
      expect(seen.map((a) => [a.seq, a.text])).toEqual([[1, "m1"], [2, "m2"]])
      // A healthy upstream is left alone: two more checks restart nothing.
      yield* Effect.sleep("5 seconds")
      expect(upstreams.length).toBe(2)
    }).pipe(Effect.scoped), 90_000)

  it.effect("an upstream re-sent from its first fromSeq after a crash is replaced by one from what the topic published", () =>
    Effect.gen(function*() {
      const upstreams: Array<Upstream> = []
      // The follower runs as a fiber of the hub: it logs to the hub's loggers, without the
      // annotations of the listener whose subscribe opened the topic.
      const logged: Array<{ readonly message: string; readonly annotations: ReadonlyArray<string> }> = []
      const collector = Logger.make(({ annotations, message }) =>
        logged.push({ message: String(message), annotations: [...HashMap.keys(annotations)] })
      )
      // After two activities the first stream starts again from its own fromSeq, as the re-send of
      // a Subscribe to the next owner does after its owner crashed.
      const hub = yield* hubWithFirstSubscribe(upstreams, (again) => Stream.concat(again().pipe(Stream.take(2)), again())).pipe(
        Effect.provide(Layer.merge(Logger.add(collector), Logger.minimumLogLevel(LogLevel.Info)))
      )
      const { conversationId, key } = yield* tenantWithConversation
      const path = `/conversations/${conversationId}/activities`
      const listener = yield* hub.subscribe(conversationId, 0).pipe(
        Stream.take(3),
        Stream.runCollect,
        Effect.annotateLogs("request_id", "the-first-listener"),
        Effect.fork
      )
      yield* until("the first subscribe", () => upstreams.length === 1)
      yield* tenantApi(key, "POST", path, { text: "m1" })
      yield* tenantApi(key, "POST", path, { text: "m2" })
      yield* until("a subscribe from what the topic published", () => upstreams.length >= 2)
      expect(upstreams.map((upstream) => upstream.fromSeq)).toEqual([0, 2])
      const resent = logged.filter((line) => line.message.includes("re-sent from its start"))
      expect(resent.map((line) => line.annotations)).toEqual([["conversation_id"]])
      // The replay went no further than its first activity.
      expect(upstreams[0]!.delivered).toEqual([1, 2, 1])
      yield* tenantApi(key, "POST", path, { text: "m3" })
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(listener).pipe(Effect.timeout("30 seconds")))
      expect(seen.map((a) => [a.seq, a.text])).toEqual([[1, "m1"], [2, "m2"], [3, "m3"]])
      expect(upstreams[1]!.delivered).toEqual([3])
    }).pipe(Effect.scoped), 60_000)
})

layer(TestNodeLive({ CLUSTER_STREAM_LIFETIME_MS: "1000" }), { excludeTestServices: true })("node-local hub, streams of one second", (it) => {
  it.effect("a listener gets every activity once, in order, while its upstream ends at each lifetime and is followed again", () =>
    Effect.gen(function*() {
      const upstreams: Array<Upstream> = []
      const hub = yield* hubWithFirstSubscribe(upstreams, (again) => again())
      const { conversationId, key } = yield* tenantWithConversation
      const total = 60
      const listener = yield* hub.subscribe(conversationId, 0).pipe(Stream.take(total), Stream.runCollect, Effect.fork)
      yield* until("the first subscribe", () => upstreams.length === 1)
      // About four seconds of posts: the owner ends the stream three times or more meanwhile.
      for (let i = 1; i <= total; i++) {
        yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: `m${i}` })
        yield* Effect.sleep("60 millis")
      }
      const seen = Chunk.toReadonlyArray(yield* Fiber.join(listener).pipe(Effect.timeout("30 seconds")))
      expect(seen.map((a) => a.seq)).toEqual(Array.from({ length: total }, (_, i) => i + 1))
      expect(upstreams.length).toBeGreaterThanOrEqual(3)
    }).pipe(Effect.scoped), 60_000)
})
