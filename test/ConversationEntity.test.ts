import { expect, layer } from "@effect/vitest"
import { SqlClient, SqlError } from "@effect/sql"
import { Sharding } from "@effect/cluster"
import { Cause, Context, Effect, ExecutionStrategy, Exit, Fiber, FiberId, HashMap, Layer, Logger, LogLevel, Runtime, Schedule, Scope } from "effect"
import { makeConversationCore } from "../src/conversations/ConversationCore.js"
import { ConversationCores } from "../src/conversations/ConversationCores.js"
import type { AppendRequest, StatusRequest } from "../src/conversations/ConversationOwners.js"
import { moved } from "../cluster/ConversationEntityLive.js"
import { ConversationEntity } from "../cluster/ConversationEntity.js"
import { ActivityRepo } from "../src/conversations/ActivityRepo.js"
import { ActivityWriter, MAX_STATEMENT_JSON } from "../src/conversations/ActivityWriter.js"
import { Conversations } from "../src/conversations/Conversations.js"
import { ConversationStateRepo } from "../src/conversations/ConversationState.js"
import type { ActivityDraft } from "../src/domain/Activity.js"
import type { ConversationId } from "../src/domain/Conversation.js"
import { TenantId } from "../src/domain/Tenant.js"
import { holdConversationRow, query, serverUrl } from "./support/TestDatabase.js"
import { messageDraft, storedTexts, tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { TestNodeLive } from "./support/TestNode.js"
import { overrideConversationCall } from "./support/EntityCallOverride.js"

/**
 * A second owner's core for a conversation (as after a crash or a handoff), on the node's store,
 * whose state reads fail while `failing.on` is set (a database that answers errors for a moment).
 */
const secondOwner = (conversationId: ConversationId, failing: { on: boolean }) =>
  Effect.gen(function*() {
    const real = yield* ConversationStateRepo
    const states = ConversationStateRepo.make({
      load: (id: ConversationId) =>
        Effect.suspend(() =>
          failing.on ? Effect.fail(new SqlError.SqlError({ cause: "injected", message: "connection reset" })) : real.load(id)
        )
    })
    return yield* makeConversationCore(conversationId, () => true, () => {}).pipe(
      Effect.provideService(ActivityWriter, yield* ActivityWriter),
      Effect.provideService(ActivityRepo, yield* ActivityRepo),
      Effect.provideService(ConversationStateRepo, states)
    )
  })

/** A new conversation with one message `text` appended through its entity: a first owner's commit. */
const storedThroughEntity = (text: string) =>
  Effect.gen(function*() {
    const { conversationId, tenant } = yield* tenantWithConversation
    const entity = yield* ConversationEntity.client
    const message = messageDraft(text)
    const first = yield* entity(conversationId).Append({ tenantId: tenant.id, draft: message, deadline: Date.now() + 5000 })
    return { conversationId, entity, first, message, tenant }
  })

/** Waits until a statement of the test database waits for a row lock (a write held up by a test's transaction). */
const untilAStatementWaitsForALock = query<{ n: string }>(
  "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
).pipe(
  Effect.filterOrFail((rows) => Number(rows[0]!.n) > 0, () => "not waiting yet"),
  Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("10 seconds"))),
  Effect.orDie
)

/** What a call ends with when its owner stopped it mid-way (a handoff past the entity termination timeout). */
const interruptedByOwner = Effect.failCause(Cause.interrupt(FiberId.make(1_000_000, 0)))

layer(TestNodeLive(), { excludeTestServices: true })("conversation entity", (it) => {
  it.scoped("a close whose cluster call ends interrupted by the other side is settled by the conversation's status", () =>
    Effect.gen(function*() {
      const [lost, stored] = yield* Effect.all([tenantWithConversation, tenantWithConversation])
      // The owner stops one close before it writes anything, the other after its write committed.
      const SetStatusInterrupted = overrideConversationCall("SetStatus", (real, entityId) => (payload: StatusRequest) =>
        entityId === stored.conversationId ? Effect.zipRight(real.SetStatus(payload), interruptedByOwner) : interruptedByOwner
      )
      const conversations = Context.get(
        yield* Layer.build(Conversations.Default.pipe(Layer.provide(SetStatusInterrupted))),
        Conversations
      )
      const close = (case_: typeof lost) =>
        Effect.exit(conversations.setStatus({ tenantId: case_.tenant.id, channelId: null }, case_.conversationId, "closed"))
      const [notWritten, written] = yield* Effect.all([close(lost), close(stored)], { concurrency: "unbounded" })
      const error = Exit.isFailure(notWritten) ? Cause.failureOption(notWritten.cause) : undefined
      expect(error?._tag === "Some" && error.value._tag === "Unavailable" && error.value.reason).toBe("cluster_unavailable")
      expect(Exit.isSuccess(written) && written.value.status).toBe("closed")
      const statuses = yield* query<{ id: string; status: string }>(
        "SELECT id, status FROM conversations WHERE id = ANY($1::uuid[]) ORDER BY id",
        [[lost.conversationId, stored.conversationId]]
      )
      expect(Object.fromEntries(statuses.map((row) => [row.id, row.status]))).toEqual({
        [lost.conversationId]: "active",
        [stored.conversationId]: "closed"
      })
    }))

  // A crash re-send of this draft reached a node that let go of the shard before taking it: the
  // first owner had stored it. Sent again, the append is answered with that activity, once.
  it.scoped("an append the cluster answers moved is sent again: the stored draft is its answer, stored once", () =>
    Effect.gen(function*() {
      const { conversationId, tenant } = yield* tenantWithConversation
      const answers: Array<string> = []
      const MovedAfterStoring = overrideConversationCall("Append", (real) => (payload: AppendRequest) => {
        answers.push(answers.length === 0 ? "moved" : "real")
        return answers.length === 1 ? Effect.zipRight(real.Append(payload), moved()) : real.Append(payload)
      })
      // This node owns no shard here: the append goes through the cluster.
      const OwnsNoShard = Layer.effect(
        Sharding.Sharding,
        Effect.map(Sharding.Sharding, (sharding) => Sharding.Sharding.of({ ...sharding, hasShardId: () => false }))
      )
      const conversations = Context.get(
        yield* Layer.build(Conversations.Default.pipe(
          Layer.provide(ConversationCores.Default()),
          Layer.provide(MovedAfterStoring),
          Layer.provide(OwnsNoShard)
        )),
        Conversations
      )
      const activity = yield* conversations.append({ tenantId: tenant.id, channelId: null }, conversationId, { text: "once" }, {
        idempotencyKey: null,
        sourceChannelId: null,
        arrivedAt: Date.now()
      })
      expect(answers).toEqual(["moved", "real"])
      expect(activity).toMatchObject({ seq: 1, text: "once" })
      expect(yield* storedTexts(conversationId)).toEqual([[1, "once"]])
    }))

  // The core is dropped (idle, or its node stopping) just as a command reaches it.
  it.scoped("a command sent as its core closes is answered Moved, never left waiting", () =>
    Effect.gen(function*() {
      const { conversationId, tenant } = yield* tenantWithConversation
      const scope = yield* Scope.make(ExecutionStrategy.sequential)
      const core = yield* makeConversationCore(conversationId, () => true, () => {}).pipe(
        Scope.extend(scope),
        Effect.provideService(ActivityWriter, yield* ActivityWriter),
      Effect.provideService(ActivityRepo, yield* ActivityRepo),
        Effect.provideService(ConversationStateRepo, yield* ConversationStateRepo)
      )
      // The core's fiber is waiting for commands.
      yield* Effect.sleep("50 millis")
      const runtime = yield* Effect.runtime<never>()
      // In one step: the command wakes the core's fiber, and the scope closes before that fiber runs.
      const caller = yield* Effect.sync(() => {
        const sent = Runtime.runFork(runtime)(
          core.append({ tenantId: tenant.id, draft: messageDraft("as it closes"), deadline: Date.now() + 5000 })
        )
        Runtime.runFork(runtime)(Scope.close(scope, Exit.void))
        return sent
      })
      const answer = yield* Fiber.await(caller).pipe(Effect.timeout("3 seconds"))
      expect(Exit.isFailure(answer) && Cause.failureOption(answer.cause).pipe((e) => e._tag === "Some" && e.value._tag)).toBe("Moved")
      expect(yield* storedTexts(conversationId)).toEqual([])
      // Closed: later commands are answered at once too.
      const later = yield* Effect.flip(core.append({ tenantId: tenant.id, draft: messageDraft("later"), deadline: Date.now() + 5000 }))
      expect(later._tag).toBe("Moved")
    }))

  // The first owner stored the draft and was lost before answering; the cluster re-sends it.
  it.scoped("a re-sent draft whose state read fails after its conflict has an unknown outcome, not a 503", () =>
    Effect.gen(function*() {
      const { conversationId, tenant } = yield* tenantWithConversation
      const entity = yield* ConversationEntity.client
      const draft = messageDraft("stored by the first owner")
      yield* entity(conversationId).Append({ tenantId: tenant.id, draft, deadline: Date.now() + 5000 })
      const failing = { on: false }
      const core = yield* secondOwner(conversationId, failing)
      // A cached state (head 1 → 2): the re-send is written without a look and refused as a duplicate.
      yield* core.append({ tenantId: tenant.id, draft: messageDraft("warm-up"), deadline: Date.now() + 5000 })
      failing.on = true
      const error = yield* Effect.flip(core.append({ tenantId: tenant.id, draft, deadline: Date.now() + 5000 }))
      failing.on = false
      expect(error._tag).toBe("WriteOutcomeUnknown")
      expect(yield* storedTexts(conversationId)).toEqual([[1, "stored by the first owner"], [2, "warm-up"]])
    }))

  it.scoped("a late re-send whose state read fails has an unknown outcome, not a 503", () =>
    Effect.gen(function*() {
      const { conversationId, tenant } = yield* tenantWithConversation
      const entity = yield* ConversationEntity.client
      const draft = messageDraft("committed before the crash")
      yield* entity(conversationId).Append({ tenantId: tenant.id, draft, deadline: Date.now() + 5000 })
      const core = yield* secondOwner(conversationId, { on: true })
      const error = yield* Effect.flip(core.append({ tenantId: tenant.id, draft, deadline: Date.now() - 1 }))
      expect(error._tag).toBe("WriteOutcomeUnknown")
      expect(yield* storedTexts(conversationId)).toEqual([[1, "committed before the crash"]])
    }))

  it.effect("an append past its deadline is refused with 503 and stores nothing", () =>
    Effect.gen(function*() {
      const { conversationId, tenant } = yield* tenantWithConversation
      const entity = yield* ConversationEntity.client
      const error = yield* Effect.flip(
        entity(conversationId).Append({ tenantId: tenant.id, draft: messageDraft("late"), deadline: Date.now() - 1 })
      )
      expect(error._tag).toBe("Unavailable")
      // It reached the entity late: the time was lost on the way, not in the database.
      expect(error._tag === "Unavailable" && error.reason).toBe("cluster_unavailable")
      expect(yield* storedTexts(conversationId)).toEqual([])
    }))

  // Its draft may be in a write whose commit PostgreSQL still holds up (the test holds the
  // conversation's row, as that write would): a 503 could be proved wrong by the commit.
  it.scoped.runIf(serverUrl !== undefined)(
    "an append past its deadline while a write of its conversation is in flight has an unknown outcome, not a 503",
    () =>
      Effect.gen(function*() {
        const { conversationId, tenant } = yield* tenantWithConversation
        const entity = yield* ConversationEntity.client
        yield* holdConversationRow(conversationId)
        const error = yield* Effect.flip(
          entity(conversationId).Append({ tenantId: tenant.id, draft: messageDraft("undecided"), deadline: Date.now() - 1 })
        )
        expect(error._tag).toBe("WriteOutcomeUnknown")
      })
  )

  it.effect("a close past its deadline is refused with 503 and changes nothing", () =>
    Effect.gen(function*() {
      const { conversationId, tenant } = yield* tenantWithConversation
      const entity = yield* ConversationEntity.client
      const error = yield* Effect.flip(entity(conversationId).SetStatus({
        tenantId: tenant.id,
        status: "closed",
        reason: "manual",
        idleSince: null,
        deadline: Date.now() - 1
      }))
      expect(error._tag).toBe("Unavailable")
      expect(yield* storedTexts(conversationId)).toEqual([])
      const rows = yield* query<{ status: string }>("SELECT status FROM conversations WHERE id = $1", [conversationId])
      expect(rows).toEqual([{ status: "active" }])
    }))

  it.scoped("a re-sent draft (same id, as after a crash) returns the stored activity and adds nothing", () =>
    Effect.gen(function*() {
      const { conversationId, first, message, tenant } = yield* storedThroughEntity("once")
      // The cluster re-sends it to a new owner, which has no memory of the conversation: its first
      // round loads the state and writes the draft without looking, and the write refuses it.
      const core = yield* secondOwner(conversationId, { on: false })
      const again = yield* core.append({ tenantId: tenant.id, draft: message, deadline: Date.now() + 5000 })
      expect(again).toEqual(first)
      expect(yield* storedTexts(conversationId)).toEqual([[1, "once"]])
      // Nothing moved: the new owner goes on from the stored head.
      const next = yield* core.append({ tenantId: tenant.id, draft: messageDraft("next"), deadline: Date.now() + 5000 })
      expect(next.seq).toBe(2)
      expect(yield* storedTexts(conversationId)).toEqual([[1, "once"], [2, "next"]])
    }))

  // A re-send after a crash may reach the next owner just before its deadline (failover takes about
  // as long as the deadline), be decided in time, and find the deadline passed when its write starts.
  it.scoped("a re-sent draft whose write starts past its deadline is answered with the stored activity, not a 503", () =>
    Effect.gen(function*() {
      const { conversationId, first, message, tenant } = yield* storedThroughEntity("committed before the owner crashed")
      const real = yield* ActivityWriter
      // The next owner's writer is busy: a group waits 300 ms for its statement.
      const slowWriter = ActivityWriter.make({
        write: (group) => Effect.zipRight(Effect.sleep("300 millis"), real.write(group))
      })
      const core = yield* makeConversationCore(conversationId, () => true, () => {}).pipe(
        Effect.provideService(ActivityWriter, slowWriter),
        Effect.provideService(ActivityRepo, yield* ActivityRepo),
        Effect.provideService(ConversationStateRepo, yield* ConversationStateRepo)
      )
      const again = yield* core.append({ tenantId: tenant.id, draft: message, deadline: Date.now() + 150 })
      expect(again).toEqual(first)
      // A draft never stored still gets its 503, and stores nothing.
      const never = yield* Effect.flip(
        core.append({ tenantId: tenant.id, draft: messageDraft("never written"), deadline: Date.now() + 150 })
      )
      expect(never._tag).toBe("Unavailable")
      expect(yield* storedTexts(conversationId)).toEqual([[1, "committed before the owner crashed"]])
    }))

  it.effect("a re-sent draft that arrives past its deadline is answered with the stored activity, not a 503", () =>
    Effect.gen(function*() {
      const { conversationId, entity, first, message, tenant } = yield* storedThroughEntity("committed before the owner crashed")
      // The owner crashed after its commit; the message reaches the next owner too late to write.
      const late = yield* entity(conversationId).Append({ tenantId: tenant.id, draft: message, deadline: Date.now() - 1 })
      expect(late).toEqual(first)
      // A late draft that was never stored is still refused, and stores nothing.
      const never = yield* Effect.flip(
        entity(conversationId).Append({ tenantId: tenant.id, draft: messageDraft("too late"), deadline: Date.now() - 1 })
      )
      expect(never._tag).toBe("Unavailable")
      expect(yield* storedTexts(conversationId)).toEqual([[1, "committed before the owner crashed"]])
    }))

  it.effect("when another writer moved the head, the entity reloads and continues gap-free", () =>
    Effect.gen(function*() {
      const { conversationId, key, tenant } = yield* tenantWithConversation
      const path = `/conversations/${conversationId}/activities`
      yield* tenantApi(key, "POST", path, { text: "one" })
      // A second owner for a moment: it wrote seq 2 behind this entity's back.
      yield* query(
        `INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text) VALUES ($1, 2, $2, $3, 'message', 'user', 'other')`,
        [conversationId, crypto.randomUUID(), tenant.id]
      )
      yield* query("UPDATE conversations SET head_seq = 2 WHERE id = $1", [conversationId])
      const third = yield* tenantApi(key, "POST", path, { text: "three" })
      expect(third.status).toBe(201)
      expect(third.body.data.seq).toBe(3)
      expect(yield* storedTexts(conversationId)).toEqual([[1, "one"], [2, "other"], [3, "three"]])
    }))

  it.effect("a conversation of another tenant is not found, whatever the entity has loaded", () =>
    Effect.gen(function*() {
      const { conversationId } = yield* tenantWithConversation
      const entity = yield* ConversationEntity.client
      const error = yield* Effect.flip(
        entity(conversationId).Append({ tenantId: TenantId.to.make(crypto.randomUUID()), draft: messageDraft("x"), deadline: Date.now() + 5000 })
      )
      expect(error._tag).toBe("NotFound")
      expect(yield* storedTexts(conversationId)).toEqual([])
    }))

  it.scoped("a conversation's core logs as the node, not with the annotations of the caller that started it", () => {
    const logged: Array<{ readonly message: string; readonly annotations: ReadonlyArray<string> }> = []
    const collector = Logger.make(({ annotations, message }) =>
      logged.push({ message: String(message), annotations: [...HashMap.keys(annotations)] })
    )
    return Effect.gen(function*() {
      // A bug in reading the state: the round that meets it writes the core's one log line.
      const buggyStates = Layer.succeed(ConversationStateRepo, ConversationStateRepo.make({ load: () => Effect.die("a bug") }))
      const cores = Context.get(yield* Layer.build(ConversationCores.Default().pipe(Layer.provide(buggyStates))), ConversationCores)
      const { conversationId, tenant } = yield* tenantWithConversation
      const core = yield* cores.get(conversationId).pipe(Effect.annotateLogs("request_id", "the-first-caller"))
      // A status change is decided by the core's own fiber, not inline in its caller's.
      const exit = yield* Effect.exit(
        core.setStatus({ tenantId: tenant.id, status: "closed", reason: "manual", idleSince: null, deadline: Date.now() + 5000 })
      )
      expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
      const failed = logged.filter((line) => line.message.includes("conversation round failed unexpectedly"))
      expect(failed.map((line) => line.annotations)).toEqual([[]])
      expect(yield* storedTexts(conversationId)).toEqual([])
    }).pipe(Effect.provide(Layer.merge(Logger.add(collector), Logger.minimumLogLevel(LogLevel.Info))))
  })

  it.effect("an append plans a delivery to the origin channel with the redacted activity", () =>
    Effect.gen(function*() {
      const { channel, conversationId, key } = yield* tenantWithConversation
      const reply = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, {
        text: "hi",
        metadata: { api_key: "secret-value", note: "kept" }
      })
      expect(reply.body.data.metadata).toEqual({ api_key: "secret-value", note: "kept" })
      const deliveries = yield* query<{ channel_id: string; status: string; payload: { metadata: object } }>(
        "SELECT channel_id, status, payload FROM deliveries WHERE activity_id = $1",
        [reply.body.data.id]
      )
      expect(deliveries).toHaveLength(1)
      expect(deliveries[0]).toMatchObject({ channel_id: channel.id, status: "pending" })
      expect(deliveries[0]!.payload.metadata).toEqual({ api_key: "[REDACTED]", note: "kept" })
      // The payload is the activity as stored and as the API reads it back, timestamp included.
      const listed = yield* tenantApi(key, "GET", `/conversations/${conversationId}/activities`)
      expect(listed.body.data).toEqual([reply.body.data])
      expect(deliveries[0]!.payload).toEqual({ ...reply.body.data, metadata: { api_key: "[REDACTED]", note: "kept" } })
    }))

  it.effect("a closed conversation reopened through another owner takes appends again", () =>
    Effect.gen(function*() {
      const { conversationId, key, tenant } = yield* tenantWithConversation
      expect((yield* tenantApi(key, "POST", `/conversations/${conversationId}/close`)).status).toBe(200)
      // Another owner for a moment reopened it: its event and status, behind this entity's back.
      yield* query(
        `INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, metadata)
         VALUES ($1, 2, $2, $3, 'conversationUpdate', 'system', '{"event":"conversation_reopened","status":"active","reason":"manual"}')`,
        [conversationId, crypto.randomUUID(), tenant.id]
      )
      yield* query("UPDATE conversations SET head_seq = 2, status = 'active', closed_at = NULL WHERE id = $1", [conversationId])
      const reply = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "back" })
      expect(reply.status).toBe(201)
      expect(reply.body.data.seq).toBe(3)
      const closed = yield* tenantApi(key, "POST", `/conversations/${conversationId}/close`)
      expect(closed.body.data.status).toBe("closed")
    }))

  it.effect("deliveries follow the origin channel's mode as it is when the activity is written", () =>
    Effect.gen(function*() {
      const { channel, conversationId, key } = yield* tenantWithConversation
      const post = (text: string) => tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text })
      const planned = Effect.map(
        query<{ n: string }>("SELECT count(*) AS n FROM deliveries WHERE conversation_id = $1", [conversationId]),
        (rows) => Number(rows[0]!.n)
      )
      yield* post("duplex")
      expect(yield* planned).toBe(1)
      yield* query("UPDATE channels SET mode = 'inbound' WHERE id = $1", [channel.id])
      yield* post("inbound only")
      expect(yield* planned).toBe(1)
      yield* query("UPDATE channels SET mode = 'duplex' WHERE id = $1", [channel.id])
      yield* post("duplex again")
      expect(yield* planned).toBe(2)
    }))

  it.effect.runIf(serverUrl !== undefined)(
    "an expiry decided in the same round as an append is void: the conversation stays open",
    () =>
      Effect.gen(function*() {
        const { conversationId, tenant } = yield* tenantWithConversation
        const sql = yield* SqlClient.SqlClient
        const entity = yield* ConversationEntity.client
        const deadline = () => Date.now() + 5000
        const append = (text: string) =>
          entity(conversationId).Append({ tenantId: tenant.id, draft: messageDraft(text), deadline: deadline() })
        // The first append's write waits for the row lock, so the next two commands share a round.
        const [first, second, expiry] = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT 1 FROM conversations WHERE id = ${conversationId} FOR UPDATE`
          const first = yield* Effect.fork(append("first"))
          // Its write waits for the row: the next commands queue for one round, in the order sent.
          yield* untilAStatementWaitsForALock
          const second = yield* Effect.fork(append("I am here"))
          // Well within the writer's lock wait (WRITE_LOCK_TIMEOUT_MS), with the 300 ms below.
          yield* Effect.sleep("100 millis")
          const idleSince = new Date().toISOString()
          const expiry = yield* Effect.fork(entity(conversationId).SetStatus({
            tenantId: tenant.id,
            status: "closed",
            reason: "expired",
            idleSince,
            deadline: deadline()
          }))
          yield* Effect.sleep("300 millis")
          return [first, second, expiry] as const
        }))
        expect((yield* Fiber.join(first)).seq).toBe(1)
        expect((yield* Fiber.join(second)).seq).toBe(2)
        expect(yield* Fiber.join(expiry)).toEqual({ changed: false })
        expect(yield* storedTexts(conversationId)).toEqual([[1, "first"], [2, "I am here"]])
      })
  )

  it.effect.runIf(serverUrl !== undefined)(
    "appends queued behind a held-up write go in rounds whose drafts fit one batch statement",
    () =>
      Effect.gen(function*() {
        const { conversationId, tenant } = yield* tenantWithConversation
        const sql = yield* SqlClient.SqlClient
        const entity = yield* ConversationEntity.client
        const append = (draft: ActivityDraft) =>
          entity(conversationId).Append({ tenantId: tenant.id, draft, deadline: Date.now() + 10_000 })
        // Near the documents' limits (about 120 kB of JSON each): 60 of them are about 7 MB.
        const large = (i: number): ActivityDraft => ({
          ...messageDraft(`${i} `.padEnd(65_536, "x")),
          metadata: { note: "m".repeat(16_000) },
          attachments: Array.from({ length: 10 }, () => ({ contentType: "text/plain", content: "a".repeat(4_000) }))
        })
        const [first, rest] = yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT 1 FROM conversations WHERE id = ${conversationId} FOR UPDATE`
          const first = yield* Effect.fork(append(messageDraft("first")))
          yield* untilAStatementWaitsForALock
          const rest = yield* Effect.forEach(Array.from({ length: 60 }, (_, i) => i), (i) => Effect.fork(append(large(i))))
          // Well within the writer's lock wait (WRITE_LOCK_TIMEOUT_MS).
          yield* Effect.sleep("300 millis")
          return [first, rest] as const
        }))
        const seqs = [(yield* Fiber.join(first)).seq, ...(yield* Effect.forEach(rest, (fiber) => Effect.map(Fiber.join(fiber), (a) => a.seq)))]
        expect(seqs.sort((a, b) => a - b)).toEqual(Array.from({ length: 61 }, (_, i) => i + 1))
        // A round's activities are written by one statement, in one transaction: they share `inserted_at`.
        const rounds = yield* query<{ activities: string; bytes: string }>(
          `SELECT count(*) AS activities, sum(octet_length(text) + octet_length(metadata::text) + octet_length(attachments::text)) AS bytes
           FROM activities WHERE conversation_id = $1 AND seq > 1 GROUP BY inserted_at`,
          [conversationId]
        )
        expect(rounds.length).toBeGreaterThan(1)
        for (const round of rounds) expect(Number(round.bytes)).toBeLessThanOrEqual(MAX_STATEMENT_JSON / 2)
      })
  )

  it.effect("an expiry is void once an earlier round appended after its idle mark; a later mark closes with reason expired", () =>
    Effect.gen(function*() {
      const { conversationId, tenant } = yield* tenantWithConversation
      const entity = yield* ConversationEntity.client
      const expire = (idleSince: string) =>
        entity(conversationId).SetStatus({
          tenantId: tenant.id,
          status: "closed",
          reason: "expired",
          idleSince,
          deadline: Date.now() + 5000
        })
      const before = new Date().toISOString()
      yield* Effect.sleep("20 millis")
      yield* entity(conversationId).Append({ tenantId: tenant.id, draft: messageDraft("after the mark"), deadline: Date.now() + 5000 })
      // The append's round is over: the expiry is decided on the stored updated_at, not on this round.
      expect(yield* expire(before)).toEqual({ changed: false })
      expect(yield* query<{ status: string }>("SELECT status FROM conversations WHERE id = $1", [conversationId]))
        .toEqual([{ status: "active" }])
      yield* Effect.sleep("20 millis")
      expect(yield* expire(new Date().toISOString())).toEqual({ changed: true })
      const events = yield* query<{ seq: string; sender: string; metadata: unknown }>(
        "SELECT seq, sender, metadata FROM activities WHERE conversation_id = $1 ORDER BY seq",
        [conversationId]
      )
      expect(events.map((e) => Number(e.seq))).toEqual([1, 2])
      expect(events[1]).toMatchObject({
        sender: "system",
        metadata: { event: "conversation_closed", status: "closed", reason: "expired" }
      })
    }))
})
