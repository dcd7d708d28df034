import { expect, layer } from "@effect/vitest"
import { Effect, Either, Fiber } from "effect"
import type { WriteGroup } from "../src/conversations/ActivityBatchSql.js"
import { ActivityWriter, SeqTaken } from "../src/conversations/ActivityWriter.js"
import type { Activity } from "../src/domain/Activity.js"
import type { ConversationId } from "../src/domain/Conversation.js"
import type { TenantId } from "../src/domain/Tenant.js"
import { insertChannel, insertConversation, messageDraft, storedTexts } from "./support/Fixtures.js"
import { holdConversationRow, query, serverUrl } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

const group = (
  tenantId: TenantId,
  conversationId: ConversationId,
  oldHead: number,
  text: string,
  deadline = Date.now() + 5_000,
  keyChecks: ReadonlyArray<string> = []
): WriteGroup => ({
  conversationId,
  tenantId,
  oldHead,
  activities: [messageDraft(text)],
  deliveries: [],
  status: null,
  deadline,
  keyChecks
})

const headOf = (conversationId: string) =>
  Effect.map(
    query<{ head_seq: string }>("SELECT head_seq FROM conversations WHERE id = $1", [conversationId]),
    (rows) => Number(rows[0]!.head_seq)
  )

/** A tenant with two conversations on one channel, and the node's writer. */
const twoConversations = Effect.gen(function*() {
  const tenant = yield* createTenant()
  const channel = yield* insertChannel(tenant.id)
  const [first, second] = yield* Effect.all([insertConversation(tenant.id, channel.id), insertConversation(tenant.id, channel.id)])
  return { tenant, first, second, store: yield* ActivityWriter }
})

type Written = Either.Either<ReadonlyArray<Activity>, { readonly _tag: string }>

/**
 * One group of a batch failed alone: `kept` stored its one activity `text` (head 1), `failed` ended
 * with `tag`, stored nothing and kept head 0.
 */
const failedAlone = (
  kept: { readonly id: string; readonly text: string; readonly result: Written },
  failed: { readonly id: string; readonly tag: string; readonly result: Written }
) =>
  Effect.gen(function*() {
    expect(Either.isRight(kept.result) && kept.result.right.map((a) => [a.seq, a.text])).toEqual([[1, kept.text]])
    expect(Either.isLeft(failed.result) && failed.result.left._tag).toBe(failed.tag)
    expect(yield* storedTexts(kept.id)).toEqual([[1, kept.text]])
    expect(yield* storedTexts(failed.id)).toEqual([])
    expect([yield* headOf(kept.id), yield* headOf(failed.id)]).toEqual([1, 0])
  })

layer(TestNodeLive(), { excludeTestServices: true })("activity writer", (it) => {
  it.effect("groups written together: one with a moved head fails alone, the others commit", () =>
    Effect.gen(function*() {
      const { first: fresh, second: moved, store, tenant } = yield* twoConversations
      // `moved` is at head 0, so a writer that believes it is at 3 must lose.
      const [ok, lost] = yield* Effect.all([
        Effect.either(store.write(group(tenant.id, fresh, 0, "kept"))),
        Effect.either(store.write(group(tenant.id, moved, 3, "refused")))
      ], { concurrency: "unbounded" })
      yield* failedAlone({ id: fresh, text: "kept", result: ok }, { id: moved, tag: "SeqTaken", result: lost })
    }))

  it.effect("a group with a value PostgreSQL refuses fails alone; the others of its statement commit", () =>
    Effect.gen(function*() {
      const { first: fine, second: refused, store, tenant } = yield* twoConversations
      // The route refuses U+0000 (422); written anyway, jsonb refuses it and fails the statement.
      const [ok, failed] = yield* Effect.all([
        Effect.either(store.write(group(tenant.id, fine, 0, "kept"))),
        Effect.either(store.write(group(tenant.id, refused, 0, "nul \u0000 inside")))
      ], { concurrency: "unbounded" })
      yield* failedAlone({ id: fine, text: "kept", result: ok }, { id: refused, tag: "WriteFailed", result: failed })
    }))

  it.effect("a group with an idempotency key already stored is not written (KeyTaken); others commit", () =>
    Effect.gen(function*() {
      const { first: repeated, second: other, store, tenant } = yield* twoConversations
      const keyed = (conversationId: ConversationId, oldHead: number, text: string, key: string): WriteGroup => ({
        ...group(tenant.id, conversationId, oldHead, text),
        activities: [messageDraft(text, key)]
      })
      yield* store.write(keyed(repeated, 0, "first", "k"))
      const [again, elsewhere] = yield* Effect.all([
        Effect.either(store.write(keyed(repeated, 1, "second", "k"))),
        Effect.either(store.write(keyed(other, 0, "same key, other conversation", "k")))
      ], { concurrency: "unbounded" })
      expect(Either.isLeft(again) && again.left._tag).toBe("KeyTaken")
      expect(Either.isRight(elsewhere)).toBe(true)
      expect(yield* storedTexts(repeated)).toEqual([[1, "first"]])
      expect(yield* headOf(repeated)).toBe(1)
      expect(yield* storedTexts(other)).toEqual([[1, "same key, other conversation"]])
    }))

  it.effect("a group whose API key is no longer valid is not written (KeyNoLongerValid); others commit", () =>
    Effect.gen(function*() {
      const { first: revoked, second: valid, store, tenant } = yield* twoConversations
      const keyIds = yield* query<{ id: string; kind: string }>("SELECT id, kind FROM api_keys WHERE tenant_id = $1", [tenant.id])
      const primary = keyIds.find((k) => k.kind === "primary")!.id
      // A scoped key, revoked after a node looked it up.
      const doomed = crypto.randomUUID()
      yield* query(
        `INSERT INTO api_keys (id, tenant_id, kind, name, prefix, key_hash, scopes, created_by, revoked_at)
         VALUES ($1, $2, 'scoped', 'doomed', 'ck_doomed00', $3, '{write}', 'test', now())`,
        [doomed, tenant.id, Buffer.from(doomed)]
      )
      const [refused, ok] = yield* Effect.all([
        Effect.either(store.write(group(tenant.id, revoked, 0, "refused", undefined, [primary, doomed]))),
        Effect.either(store.write(group(tenant.id, valid, 0, "kept", undefined, [primary])))
      ], { concurrency: "unbounded" })
      yield* failedAlone({ id: valid, text: "kept", result: ok }, { id: revoked, tag: "KeyNoLongerValid", result: refused })
      // A key of a tenant that is no longer active writes nothing either.
      yield* query("UPDATE tenants SET status = 'inactive' WHERE id = $1", [tenant.id])
      const suspended = yield* Effect.either(store.write(group(tenant.id, valid, 1, "suspended", undefined, [primary])))
      expect(Either.isLeft(suspended) && suspended.left._tag).toBe("KeyNoLongerValid")
      expect(yield* storedTexts(valid)).toEqual([[1, "kept"]])
    }))

  it.effect.runIf(serverUrl !== undefined)(
    "after a failed batch statement, each group is written alone only while its own deadline allows",
    () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* insertChannel(tenant.id)
        const conversations = yield* Effect.all(Array.from({ length: 5 }, () => insertConversation(tenant.id, channel.id)))
        const store = yield* ActivityWriter
        // Every 'slow' row takes 300 ms to insert, and counts itself in a sequence, which a rolled-back
        // statement does not undo; a re-sent draft id fails the batch statement at its end.
        yield* query("CREATE SEQUENCE slow_rows_seen")
        yield* query(`CREATE FUNCTION slow_row() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN IF NEW.text LIKE 'slow%' THEN PERFORM nextval('slow_rows_seen'); PERFORM pg_sleep(0.3); END IF;
          RETURN NEW; END $$`)
        yield* query("CREATE TRIGGER slow_rows BEFORE INSERT ON activities FOR EACH ROW EXECUTE FUNCTION slow_row()")
        const stored = yield* store.write(group(tenant.id, conversations[4]!, 0, "stored"))
        const resent: WriteGroup = {
          ...group(tenant.id, conversations[4]!, 1, "re-sent", Date.now() + 30_000),
          activities: [{ ...messageDraft("re-sent"), id: stored[0]!.id }]
        }
        // All five go in one batch statement, which runs the four slow rows (1.2 s, under the writer's
        // 2 s statement timeout) before the re-sent id fails it. Alone, 'slow 0' is written from 1.2 s
        // to 1.5 s, so the others could start at 1.5 s at the earliest: past their deadline at 1.45 s,
        // which the batch statement (started at once) met. 'slow 0' has time to spare.
        const startedAt = Date.now()
        const tight = startedAt + 1_450
        const results = yield* Effect.all([
          ...conversations.slice(0, 4).map((id, i) =>
            Effect.either(store.write(group(tenant.id, id, 0, `slow ${i}`, i === 0 ? startedAt + 30_000 : tight)))
          ),
          Effect.either(store.write(resent))
        ], { concurrency: "unbounded" }).pipe(
          Effect.ensuring(query("DROP TRIGGER slow_rows ON activities; DROP FUNCTION slow_row()").pipe(Effect.orDie))
        )
        const seen = yield* query<{ n: string }>("SELECT last_value AS n FROM slow_rows_seen")
        yield* query("DROP SEQUENCE slow_rows_seen")
        const [first, ...rest] = results
        expect(Either.isRight(first!) && first.right.map((a) => [a.seq, a.text])).toEqual([[1, "slow 0"]])
        expect(rest.map((result) => Either.isLeft(result) && result.left._tag)).toEqual([
          "TooLate",
          "TooLate",
          "TooLate",
          "SeqTaken"
        ])
        // The re-sent group fails alone on its own conflict, and moves nothing.
        expect(Either.isLeft(rest[3]!) && rest[3].left).toEqual(new SeqTaken({ conversationId: conversations[4]! }))
        expect(yield* Effect.forEach(conversations, storedTexts)).toEqual([
          [[1, "slow 0"]],
          [],
          [],
          [],
          [[1, "stored"]]
        ])
        expect(yield* Effect.forEach(conversations, headOf)).toEqual([1, 0, 0, 0, 1])
        // Five slow rows reached PostgreSQL: the four of the batch statement (so the tight groups met
        // their deadline there, not only before it) and 'slow 0' again, alone.
        expect(Number(seen[0]!.n)).toBe(5)
      })
  )

  it.effect.runIf(serverUrl !== undefined)(
    "a group whose conversation row another session holds fails alone; the others of its statement commit",
    () =>
      Effect.gen(function*() {
        const { first: held, second: free, store, tenant } = yield* twoConversations
        // A write of `held` waits for the row (a channel delete cascading, a write of another owner):
        // that wait must not take the unrelated groups of its batch statement down with it.
        const [waited, ok] = yield* Effect.scoped(Effect.gen(function*() {
          yield* holdConversationRow(held)
          return yield* Effect.all([
            Effect.either(store.write(group(tenant.id, held, 0, "held"))),
            Effect.either(store.write(group(tenant.id, free, 0, "free")))
          ], { concurrency: "unbounded" })
        }))
        yield* failedAlone({ id: free, text: "free", result: ok }, { id: held, tag: "WriteFailed", result: waited })
      })
  )

  it.effect.runIf(serverUrl !== undefined)(
    "while a statement waits on a row lock, a second statement writes the groups that come meanwhile",
    () =>
      Effect.gen(function*() {
        const { first: held, second: free, store, tenant } = yield* twoConversations
        // The held group's statement waits for the row until the lock timeout (1 s); the free group,
        // sent while it waits, must not wait behind it.
        const finished: Array<string> = []
        const track = (name: string, write: Effect.Effect<unknown, unknown>) =>
          Effect.either(write).pipe(Effect.tap(() => Effect.sync(() => finished.push(name))))
        yield* Effect.scoped(Effect.gen(function*() {
          yield* holdConversationRow(held)
          const waiting = yield* Effect.fork(track("held", store.write(group(tenant.id, held, 0, "held"))))
          yield* Effect.sleep("100 millis")
          yield* track("free", store.write(group(tenant.id, free, 0, "free")))
          expect(finished).toEqual(["free"])
          yield* Fiber.join(waiting)
        }))
        expect(finished).toEqual(["free", "held"])
        expect(yield* storedTexts(free)).toEqual([[1, "free"]])
      })
  )

  it.effect("a group whose deadline passed before its statement is not written (TooLate)", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id)
      const conversationId = yield* insertConversation(tenant.id, channel.id)
      const store = yield* ActivityWriter
      const late = yield* Effect.either(store.write(group(tenant.id, conversationId, 0, "late", Date.now() - 1)))
      expect(Either.isLeft(late) && late.left._tag).toBe("TooLate")
      expect(yield* storedTexts(conversationId)).toEqual([])
      expect(yield* headOf(conversationId)).toBe(0)
    }))

  // The embedded database runs one session, so its writes are not bounded (and cannot be blocked so).
  it.effect.runIf(serverUrl !== undefined)(
    "a batch statement that cannot finish in time is cancelled by PostgreSQL and stores nothing",
    () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const channel = yield* insertChannel(tenant.id)
        const conversationId = yield* insertConversation(tenant.id, channel.id)
        const store = yield* ActivityWriter
        // Its row takes longer to insert than the statement may run (a stalled disk, say): unbounded,
        // the write would wait for it. (A row lock held elsewhere ends the wait sooner: lock_timeout.)
        yield* query(`CREATE FUNCTION stalled_row() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN IF NEW.text = 'blocked' THEN PERFORM pg_sleep(5); END IF; RETURN NEW; END $$`)
        yield* query("CREATE TRIGGER stalled_rows BEFORE INSERT ON activities FOR EACH ROW EXECUTE FUNCTION stalled_row()")
        const blocked = yield* Effect.either(store.write(group(tenant.id, conversationId, 0, "blocked"))).pipe(
          Effect.ensuring(query("DROP TRIGGER stalled_rows ON activities; DROP FUNCTION stalled_row()").pipe(Effect.orDie))
        )
        expect(Either.isLeft(blocked) && blocked.left._tag).toBe("WriteFailed")
        const cause = Either.isLeft(blocked) && blocked.left._tag === "WriteFailed" ? blocked.left.cause.cause : undefined
        expect(cause).toHaveProperty("code", "57014")
        expect(yield* storedTexts(conversationId)).toEqual([])
        expect(yield* headOf(conversationId)).toBe(0)
        // The writer goes on: the next group commits.
        const next = yield* store.write(group(tenant.id, conversationId, 0, "after"))
        expect(next.map((a) => a.seq)).toEqual([1])
      })
  )
  // Near their size limits activities are about 250 kB each; many in one statement outlasted the
  // statement timeout and the whole batch failed. Each statement now carries at most 8 MiB of JSON.
  it.effect("groups written at once share statements only up to a size: large ones are spread over several", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id)
      const conversations = yield* Effect.all(Array.from({ length: 40 }, () => insertConversation(tenant.id, channel.id)))
      const store = yield* ActivityWriter
      const large = "x".repeat(300_000)
      const written = yield* Effect.all(conversations.map((id) => store.write(group(tenant.id, id, 0, large))), {
        concurrency: "unbounded"
      })
      expect(written.map((activities) => activities.length)).toEqual(conversations.map(() => 1))
      // Each statement is a transaction of its own, with its own `now()`.
      const statements = yield* query<{ n: number }>(
        "SELECT count(*)::int AS n FROM activities WHERE conversation_id = ANY($1::uuid[]) GROUP BY inserted_at",
        [conversations]
      )
      expect(statements.length).toBeGreaterThan(1)
      // 8 MiB holds 27 of these (300,000 characters each, and their other fields).
      expect(Math.max(...statements.map((row) => row.n))).toBeLessThanOrEqual(27)
      expect(statements.reduce((sum, row) => sum + row.n, 0)).toBe(40)
    }))
})
