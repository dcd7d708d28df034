/**
 * `npx tsx test/bench/cluster-call.ts`: what one local `ConversationEntity.Append` call costs, without
 * HTTP or a database. The real entity protocol (cluster/ConversationEntity.ts) with a handler that
 * answers at once, on an in-memory single runner, called with 64 in flight across 1,000 entities;
 * compared with calling the same handler as a plain Effect. Prints calls/s and CPU µs per call,
 * with `simulateRemoteSerialization` (the @effect/cluster default) on and off.
 */
import { MessageStorage, RunnerHealth, Runners, RunnerStorage, Sharding, ShardingConfig } from "@effect/cluster"
import { Context, Duration, Effect, Layer, Stream } from "effect"
import { ConversationEntity } from "../../cluster/ConversationEntity.js"
import type { Activity, ActivityDraft } from "../../src/domain/Activity.js"
import { TenantId } from "../../src/domain/Tenant.js"
import { messageDraft } from "../support/Fixtures.js"

const CALLS = Number(process.env["CALLS"] ?? "20000")
const CONCURRENCY = 64
const ENTITIES = 1000
const TENANT = TenantId.to.make("00000000-0000-4000-8000-000000000001")
const ids = Array.from({ length: ENTITIES }, () => crypto.randomUUID())


const activityOf = (draft: ActivityDraft, conversationId: string): Activity => ({
  ...draft,
  seq: 1,
  edited_at: null,
  deleted_at: null,
  conversation_id: conversationId,
  tenant_id: TENANT,
  inserted_at: "2026-01-01T00:00:00.000000Z"
})

const EntityLive = ConversationEntity.toLayer(
  Effect.succeed(ConversationEntity.of({
    Append: ({ payload }) => Effect.succeed(activityOf(payload.draft, TENANT)),
    SetStatus: () => Effect.succeed({ changed: false }),
    Subscribe: () => Stream.empty
  })),
  { concurrency: "unbounded" }
)

const runnerLayer = (simulateRemoteSerialization: boolean) =>
  Sharding.layer.pipe(
    Layer.provideMerge(Runners.layerNoop),
    Layer.provideMerge(MessageStorage.layerMemory),
    Layer.provide([RunnerStorage.layerMemory, RunnerHealth.layerNoop]),
    Layer.provide(ShardingConfig.layer({
      simulateRemoteSerialization,
      entityTerminationTimeout: Duration.millis(100)
    }))
  )

const cpuMs = () => {
  const usage = process.cpuUsage()
  return (usage.user + usage.system) / 1000
}

/** Runs `call` CALLS times, CONCURRENCY at once, after a warm-up pass that also creates every entity. */
const measure = <E>(label: string, call: (i: number) => Effect.Effect<unknown, E>) =>
  Effect.gen(function*() {
    const run = (n: number) => Effect.forEach(Array.from({ length: n }, (_, i) => i), call, { concurrency: CONCURRENCY, discard: true })
    yield* run(Math.max(ENTITIES * 2, CALLS / 4))
    const started = performance.now()
    const cpu = cpuMs()
    yield* run(CALLS)
    const seconds = (performance.now() - started) / 1000
    const usedMs = cpuMs() - cpu
    console.log(`${label.padEnd(52)} ${String(Math.round(CALLS / seconds)).padStart(7)} calls/s  ${(usedMs * 1000 / CALLS).toFixed(0).padStart(5)} µs CPU/call`)
  })

const handlerOnly = measure("plain Effect (handler called directly)", (i) =>
  Effect.succeed(activityOf(messageDraft("hello from the benchmark"), ids[i % ENTITIES]!)).pipe(
    Effect.timeoutFail({ duration: 8000, onTimeout: () => "timeout" as const })
  ))

const throughCluster = (simulate: boolean) =>
  Effect.gen(function*() {
    const client = yield* ConversationEntity.client
    yield* measure(`cluster call, simulateRemoteSerialization: ${simulate}`, (i) =>
      client(ids[i % ENTITIES]!).Append({ tenantId: TENANT, draft: messageDraft("hello from the benchmark"), deadline: Date.now() + 5000 }).pipe(
        Effect.timeoutFail({ duration: 8000, onTimeout: () => "timeout" as const })
      ))
  }).pipe(Effect.provide(EntityLive.pipe(Layer.provideMerge(runnerLayer(simulate)))))

/** A caller context as big as a Parley request's (47 services there): contexts are copied per provide. */
const bigContext = Array.from({ length: 48 }, (_, i) => i).reduce(
  (context, i) => Context.add(context, Context.GenericTag<string>(`test/bench/Service${i}`), `service ${i}`),
  Context.empty()
)

const program = Effect.gen(function*() {
  console.log(`${CALLS} calls, ${CONCURRENCY} in flight, ${ENTITIES} entities`)
  yield* handlerOnly
  yield* throughCluster(true)
  yield* throughCluster(false)
  console.log("with 48 more services in the caller's context:")
  yield* Effect.provide(handlerOnly, bigContext)
  yield* Effect.provide(throughCluster(true), bigContext)
  yield* Effect.provide(throughCluster(false), bigContext)
})

Effect.runPromise(Effect.scoped(program)).then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error)
    process.exit(1)
  }
)
