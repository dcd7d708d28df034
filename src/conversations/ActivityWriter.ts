import type { SqlError } from "@effect/sql/SqlError"
import { Data, Effect, Either, Exit, Option } from "effect"
import { Counter } from "prom-client"
import { awaitReply, type Reply, WorkQueue } from "../concurrency/WorkQueue.js"
import { isDataException, isLockTimeout, isUniqueViolation } from "../db/SqlErrors.js"
import { WRITER_CONNECTIONS, WriterClient } from "../db/WriterClient.js"
import type { Activity } from "../domain/Activity.js"
import { Metrics } from "../ops/Metrics.js"
import { batchStatement, encodeRows, type EncodedRows, storedActivity, type WriteGroup } from "./ActivityBatchSql.js"

/** Another writer moved the conversation's head, or stored one of these ids or keys first. */
export class SeqTaken extends Data.TaggedError("SeqTaken")<{ readonly conversationId: string }> {}

/** The database refused or could not take the write; nothing of the group was stored. */
class WriteFailed extends Data.TaggedError("WriteFailed")<{ readonly cause: SqlError }> {}

/** An idempotency key of the group is already stored in its conversation; nothing was written. */
class KeyTaken extends Data.TaggedError("KeyTaken")<{ readonly conversationId: string }> {}

/** The group's deadline passed before a statement could take it; nothing of it was stored. */
class TooLate extends Data.TaggedError("TooLate")<{}> {}

/** An API key the group was to check is no longer valid (revoked, expired, its tenant not active); nothing was written. */
class KeyNoLongerValid extends Data.TaggedError("KeyNoLongerValid")<{}> {}

interface Pending {
  readonly group: WriteGroup
  readonly done: Reply<ReadonlyArray<Activity>, WriteError>
}

type WriteError = SeqTaken | KeyTaken | WriteFailed | TooLate | KeyNoLongerValid

/** A larger difference between the database's clock and the node's is logged at start (ADR 0004). */
const MAX_CLOCK_SKEW_MS = 1_000

/** Groups written in one statement at the most; more wait for the next one. */
const MAX_GROUPS_PER_TRANSACTION = 128
/**
 * The JSON one statement carries at the most, in UTF-16 code units (about bytes); a larger group goes
 * alone, so that large activities cannot make a batch outlast the statement timeout (ADR 0004).
 */
export const MAX_STATEMENT_JSON = 8 * 1024 * 1024
/**
 * Batch statements in flight at the most: one makes the largest, cheapest batches (ADR 0006); a second
 * starts once the first has run `SECOND_WRITER_AFTER_MS`, so a statement stuck on a lock stops no append.
 */
const WRITERS = WRITER_CONNECTIONS
const SECOND_WRITER_AFTER_MS = 20

/** How many of the groups, from the first, one statement carries (at least one). */
const groupsFitting = (groups: ReadonlyArray<WriteGroup>) => {
  let size = 0
  for (let i = 0; i < groups.length; i++) {
    size += encodeRows([groups[i]!]).size
    if (size > MAX_STATEMENT_JSON) return Math.max(1, i)
  }
  return groups.length
}

/**
 * The node's activity writer: appends from every conversation on the node go as one statement per batch
 * (group commit); gap-free seq is the database's, by `oldHead` compare-and-set and the primary key.
 */
export class ActivityWriter extends Effect.Service<ActivityWriter>()("parley/ActivityWriter", {
  scoped: Effect.gen(function*() {
    const metrics = yield* Metrics
    // Batches go through connections of their own: each statement bounded (WriteTimings), by index.
    const { client: writer, pool: writerPool } = yield* WriterClient
    if (Option.isSome(writerPool)) {
      const pool = writerPool.value
      metrics.gauge("parley_db_writer_connections", "Open connections of the activity writer", () => pool.totalCount)
      metrics.gauge("parley_db_writer_waiting_requests", "Batches waiting for a writer connection", () => pool.waitingCount)
    }
    const stored = new Counter({
      name: "parley_activities_stored_total",
      help: "Activities committed by this node",
      registers: [metrics.registry]
    })
    const queue = new WorkQueue<Pending>()

    // The write fence compares the database's clock with deadlines set by this node's clock.
    yield* Effect.forkScoped(
      // Measured on an open connection: the first query's round trip includes connecting.
      Effect.zipRight(writer`SELECT 1`, Effect.suspend(() => {
        const sentAt = Date.now()
        return Effect.map(
          writer<{ now_ms: number }>`SELECT extract(epoch FROM clock_timestamp())::float8 * 1000 AS now_ms`,
          (rows) => (rows[0]?.now_ms ?? 0) - (sentAt + Date.now()) / 2
        )
      })).pipe(
        Effect.flatMap((skewMs) =>
          Math.abs(skewMs) < MAX_CLOCK_SKEW_MS ? Effect.void : Effect.logWarning(
            "the database's clock and this node's differ: appends near their deadline may be refused or settled wrongly; keep clocks in sync (NTP)"
          ).pipe(Effect.annotateLogs("skew_ms", Math.round(skewMs)))
        ),
        Effect.catchAllCause(() => Effect.void)
      )
    )

    /**
     * Writes groups in one batch statement. Answers per group: its activities, `KeyTaken`, `TooLate`,
     * `KeyNoLongerValid` or `SeqTaken`; a statement that fails fails every group of it.
     */
    const writeGroups = (groups: ReadonlyArray<WriteGroup>, encoded = encodeRows(groups)) =>
      batchStatement(writer, groups, encoded).pipe(
        Effect.map((answer) => {
          const at = answer.find((row) => row.outcome === "moved")?.at ?? ""
          const outcomes = new Map(answer.map((row) => [row.id, row.outcome]))
          return groups.map((g): Either.Either<ReadonlyArray<Activity>, SeqTaken | KeyTaken | TooLate | KeyNoLongerValid> => {
            switch (outcomes.get(g.conversationId)) {
              case "moved":
                return Either.right(g.activities.map((a, i) => storedActivity(a, g.oldHead + 1 + i, g, at)))
              case "late":
                return Either.left(new TooLate())
              case "key_refused":
                return Either.left(new KeyNoLongerValid())
              case "key_taken":
                return Either.left(new KeyTaken({ conversationId: g.conversationId }))
              default:
                return Either.left(new SeqTaken({ conversationId: g.conversationId }))
            }
          })
        }),
        Effect.catchTag("SqlError", (cause) =>
          Effect.fail(
            isUniqueViolation(cause)
              ? new SeqTaken({ conversationId: groups[0]!.conversationId })
              : new WriteFailed({ cause })
          ))
      )

    const settle = (pending: Pending, result: Either.Either<ReadonlyArray<Activity>, SeqTaken | KeyTaken | TooLate | KeyNoLongerValid>) => {
      if (Either.isRight(result)) stored.inc(result.right.length)
      pending.done(Either.isRight(result) ? Exit.succeed(result.right) : Exit.fail(result.left))
    }

    const failBatch = (batch: ReadonlyArray<Pending>, error: WriteError) =>
      Effect.sync(() => {
        for (const { done } of batch) done(Exit.fail(error))
      })

    /** Answers `TooLate` to the groups past their deadline; the others may be written now. */
    const inTime = (batch: ReadonlyArray<Pending>) => {
      const now = Date.now()
      const late = batch.filter((pending) => pending.group.deadline < now)
      if (late.length === 0) return batch
      for (const { done } of late) done(Exit.fail(new TooLate()))
      return batch.filter((pending) => pending.group.deadline >= now)
    }

    /**
     * The groups taken that one statement writes, with their rows encoded: those still in time, and
     * of large ones only as many as fit; the rest go back to the head of the queue.
     */
    const nextStatement = (taken: ReadonlyArray<Pending>) => {
      let batch = inTime(taken)
      let encoded = encodeRows(batch.map((p) => p.group))
      if (encoded.size > MAX_STATEMENT_JSON && batch.length > 1) {
        const fitting = groupsFitting(batch.map((p) => p.group))
        queue.putBack(batch.slice(fitting))
        batch = batch.slice(0, fitting)
        encoded = encodeRows(batch.map((p) => p.group))
      }
      return { batch, encoded }
    }

    /**
     * One statement for the batch; if a conflict, a refused value or a row lock held elsewhere fails
     * it, each group alone, so that one group's problem fails only that group.
     */
    const writeBatch = (batch: ReadonlyArray<Pending>, encoded: EncodedRows) =>
      Effect.gen(function*() {
        if (batch.length === 0) return
        const together = yield* Effect.either(writeGroups(batch.map((p) => p.group), encoded))
        if (Either.isRight(together)) {
          return batch.forEach((pending, i) => settle(pending, together.right[i]!))
        }
        const alone = together.left._tag !== "WriteFailed" || isDataException(together.left.cause) ||
          isLockTimeout(together.left.cause)
        if (batch.length === 1 || !alone) return yield* failBatch(batch, together.left)
        // Each group's deadline is checked when its own statement starts, not once for all.
        yield* Effect.forEach(batch, (pending) =>
          Effect.suspend(() =>
            inTime([pending]).length === 0 ? Effect.void : writeGroups([pending.group]).pipe(
              Effect.matchEffect({
                onFailure: (error) => failBatch([pending], error),
                onSuccess: ([result]) => Effect.sync(() => settle(pending, result!))
              })
            )
          ), { discard: true })
      })

    /** One batch statement for groups taken from the queue; it answers every caller it takes. */
    const statement = (taken: ReadonlyArray<Pending>) => {
      // The callers this statement answers: groups put back belong to a later one.
      let answering: ReadonlyArray<Pending> = taken
      return Effect.suspend(() => {
        const { batch, encoded } = nextStatement(taken)
        answering = batch
        return writeBatch(batch, encoded)
      }).pipe(
        // A bug in one batch answers its callers with the defect; the writer keeps writing.
        Effect.catchAllCause((cause) =>
          Effect.logError("activity write failed unexpectedly", cause).pipe(
            Effect.zipRight(Effect.sync(() => {
              for (const { done } of answering) done(Exit.failCause(cause))
            }))
          )
        )
      )
    }

    // When each statement in flight started (performance.now()), oldest first; only the loop below
    // starts statements, so once it may start one it still may when the queue has work for it.
    const running: Array<number> = []
    let statementEnded: (() => void) | undefined
    const mayStart = Effect.async<void>((resume) => {
      const check = () => {
        statementEnded = undefined
        clearTimeout(timer)
        const oldest = running[0]
        if (oldest === undefined) return resume(Effect.void)
        const waited = performance.now() - oldest
        if (running.length < WRITERS && waited >= SECOND_WRITER_AFTER_MS) return resume(Effect.void)
        statementEnded = check
        if (running.length < WRITERS) timer = setTimeout(check, SECOND_WRITER_AFTER_MS - waited)
      }
      let timer: ReturnType<typeof setTimeout> | undefined
      check()
      return Effect.sync(() => {
        statementEnded = undefined
        clearTimeout(timer)
      })
    })
    const scope = yield* Effect.scope
    yield* Effect.forkScoped(
      Effect.forever(
        mayStart.pipe(
          Effect.zipRight(queue.take(MAX_GROUPS_PER_TRANSACTION)),
          Effect.flatMap((taken) => {
            const startedAt = performance.now()
            running.push(startedAt)
            return statement(taken).pipe(
              Effect.ensuring(Effect.sync(() => {
                running.splice(running.indexOf(startedAt), 1)
                statementEnded?.()
              })),
              Effect.forkIn(scope)
            )
          })
        )
      )
    )

    /** Writes one group, sharing a statement with whatever else is waiting. */
    const write = (group: WriteGroup) =>
      awaitReply<ReadonlyArray<Activity>, WriteError>((done) => queue.offer({ group, done }))

    return { write } as const
  })
}) {}
