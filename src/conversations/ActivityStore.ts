import { SqlClient, SqlSchema } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Data, Effect, Either, Exit, Option, Schema } from "effect"
import { Counter } from "prom-client"
import { awaitReply, type Reply, WorkQueue } from "../concurrency/WorkQueue.js"
import { boundedClient } from "../db/Database.js"
import { prepared } from "../db/PreparedStatements.js"
import { isDataException, isLockTimeout, isUniqueViolation } from "../db/SqlErrors.js"
import { inTransaction } from "../db/Transaction.js"
import type { Activity, ActivityDraft } from "../domain/Activity.js"
import { isSensitiveKey, REDACTED, redactSensitive } from "../domain/Redaction.js"
import { Metrics } from "../ops/Metrics.js"
import { ACTIVITY_COLUMNS, ActivityFromRow } from "./ActivityRows.js"
import {
  IN_FLIGHT_WAIT_MS,
  WRITE_CONNECT_TIMEOUT_MS,
  WRITE_LOCK_TIMEOUT_MS,
  WRITE_QUERY_TIMEOUT_MS,
  WRITE_STATEMENT_TIMEOUT_MS
} from "./WriteTimings.js"

/** Another writer moved the conversation's head, or stored one of these ids or keys first. */
export class SeqTaken extends Data.TaggedError("SeqTaken")<{ readonly conversationId: string }> {}

/** The database refused or could not take the write; nothing of the group was stored. */
export class WriteFailed extends Data.TaggedError("WriteFailed")<{ readonly cause: SqlError }> {}

/** An idempotency key of the group is already stored in its conversation; nothing was written. */
export class KeyTaken extends Data.TaggedError("KeyTaken")<{ readonly conversationId: string }> {}

/** The group's deadline passed before a statement could take it; nothing of it was stored. */
export class TooLate extends Data.TaggedError("TooLate")<{}> {}

/** An API key the group was to check is no longer valid (revoked, expired, its tenant not active); nothing was written. */
export class KeyNoLongerValid extends Data.TaggedError("KeyNoLongerValid")<{}> {}

/** A delivery row planned for a new activity; its payload is the stored activity, redacted. */
export interface PlannedDelivery {
  readonly id: string
  readonly activityId: string
  readonly channelId: string
}

/**
 * Consecutive activities of one conversation written atomically: they take seqs
 * `oldHead + 1 …`, and the conversation's head moves from `oldHead` only if nobody moved it first.
 */
export interface WriteGroup {
  readonly conversationId: string
  readonly tenantId: string
  readonly oldHead: number
  readonly activities: ReadonlyArray<ActivityDraft>
  readonly deliveries: ReadonlyArray<PlannedDelivery>
  /** A status the conversation takes with this group (close and reopen). */
  readonly status: "active" | "closed" | null
  /** Epoch ms after which no statement may start writing the group (WriteTimings). */
  readonly deadline: number
  /** API key ids the statement finds valid before it writes the group (ADR 0015). */
  readonly keyChecks: ReadonlyArray<string>
}

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
 * The JSON one statement carries at the most, in UTF-16 code units (about bytes); a larger group
 * goes alone. Without it, a batch of activities near their size limits (about 250 kB each, twice
 * that with a delivery) outlasted the statement timeout and failed whole, the next one alike: one
 * client sending large activities stopped every append of the node. 8 MiB takes about 0.2 s.
 */
export const MAX_STATEMENT_JSON = 8 * 1024 * 1024
/**
 * Batch statements in flight at once at the most; each holds one pool connection. One statement
 * at a time makes the largest batches, which cost least per append (measured: a second statement
 * always in flight took 15-20 % more node CPU per append). A second one starts only once the
 * first has run `SECOND_WRITER_AFTER_MS`, so that appends keep moving while a statement waits on
 * a lock or a stalled connection.
 */
const WRITERS = 2
const SECOND_WRITER_AFTER_MS = 20

/** The activity a draft became, fields in the order of `Activity`; the draft's values are checked. */
const storedActivity = (draft: ActivityDraft, seq: number, group: WriteGroup, insertedAt: string): Activity => ({
  id: draft.id,
  type: draft.type,
  sender: draft.sender,
  text: draft.text,
  attachments: draft.attachments,
  metadata: draft.metadata,
  idempotency_key: draft.idempotency_key,
  seq,
  reply_to_id: draft.reply_to_id,
  message_type: draft.message_type,
  payload: draft.payload,
  source_channel_id: draft.source_channel_id,
  edited_at: null,
  deleted_at: null,
  conversation_id: group.conversationId,
  tenant_id: group.tenantId,
  inserted_at: insertedAt
})

// An activity's own field names are fixed, so which of them hide their value is decided once;
// only the free-form fields are walked.
const HIDDEN_FIELDS = ACTIVITY_COLUMNS.split(", ").filter(isSensitiveKey) as ReadonlyArray<keyof Activity>
const FREE_FORM_FIELDS = ["attachments", "metadata", "payload"] as const

/** `redactSensitive(activity)`, without looking at the names of the activity's own fields. */
const redactedActivity = (activity: Activity): Record<string, unknown> => {
  const out: Record<string, unknown> = { ...activity }
  for (const field of FREE_FORM_FIELDS) out[field] = redactSensitive(activity[field])
  for (const field of HIDDEN_FIELDS) if (out[field] !== null) out[field] = REDACTED
  return out
}

/** A group's activity rows as the batch statement reads them. */
const activityRows = (g: WriteGroup) =>
  // Field by field, as the statement's record set names them: a spread with fields added is slow in V8.
  g.activities.map((a, i) => ({
    conversation_id: g.conversationId,
    seq: g.oldHead + 1 + i,
    id: a.id,
    tenant_id: g.tenantId,
    type: a.type,
    sender: a.sender,
    text: a.text,
    attachments: a.attachments,
    metadata: a.metadata,
    idempotency_key: a.idempotency_key,
    reply_to_id: a.reply_to_id,
    message_type: a.message_type,
    payload: a.payload,
    source_channel_id: a.source_channel_id
  }))

/** A group's planned deliveries; their payloads are the stored activities (the statement fills in `inserted_at`). */
const deliveryRows = (g: WriteGroup) =>
  g.deliveries.map((d) => {
    const i = g.activities.findIndex((a) => a.id === d.activityId)
    return {
      id: d.id,
      tenant_id: g.tenantId,
      activity_id: d.activityId,
      conversation_id: g.conversationId,
      channel_id: d.channelId,
      payload: redactedActivity(storedActivity(g.activities[i]!, g.oldHead + 1 + i, g, ""))
    }
  })

/** The rows of groups as the statement's JSON documents. */
const encodeRows = (groups: ReadonlyArray<WriteGroup>) => {
  const rows = JSON.stringify(groups.flatMap(activityRows))
  const planned = JSON.stringify(groups.flatMap(deliveryRows))
  return { rows, planned, size: rows.length + planned.length }
}

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
 * The node's activity writer. Appends from every conversation entity on this node are written
 * together, one multi-row statement per batch (group commit): a round trip per batch, not per
 * activity. Gap-free seq is enforced by the database: a group commits only if the conversation's
 * `head_seq` still equals its `oldHead`, and `(conversation_id, seq)` is the primary key.
 */
export class ActivityStore extends Effect.Service<ActivityStore>()("parley/ActivityStore", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const metrics = yield* Metrics
    // Batches go through connections of their own: each statement bounded (WriteTimings), by index.
    const { client: writer, pool: writerPool } = yield* boundedClient(WRITERS, {
      connectMs: WRITE_CONNECT_TIMEOUT_MS,
      statementMs: WRITE_STATEMENT_TIMEOUT_MS,
      queryMs: WRITE_QUERY_TIMEOUT_MS,
      lockMs: WRITE_LOCK_TIMEOUT_MS
    })
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
     * Writes groups in one statement (its own transaction, one round trip): each group's head
     * moves only if it still is `oldHead`, and only the groups that moved get their activities,
     * deliveries and edit marks; a group with an idempotency key already stored in its conversation
     * does not move. Answers per group: its activities, `KeyTaken` or `SeqTaken`. A unique violation
     * (an id or idempotency key stored meanwhile) fails the whole statement.
     */
    const writeGroups = (groups: ReadonlyArray<WriteGroup>, encoded = encodeRows(groups)) =>
      Effect.gen(function*() {
        // Each set of rows goes as one JSON document: no per-value array escaping on either side.
        const heads = groups.map((g) => ({
          id: g.conversationId,
          old_head: g.oldHead,
          new_head: g.oldHead + g.activities.length,
          status: g.status,
          deadline: g.deadline,
          key_checks: g.keyChecks
        }))
        const edits: Array<string | null> = []
        const deletes: Array<string | null> = []
        const keyedConversations: Array<string> = []
        const keys: Array<string> = []
        for (const g of groups) {
          for (const a of g.activities) {
            if (a.type === "messageUpdate") edits.push(a.reply_to_id)
            else if (a.type === "messageDelete") deletes.push(a.reply_to_id)
            if (a.idempotency_key !== null) {
              keyedConversations.push(g.conversationId)
              keys.push(a.idempotency_key)
            }
          }
        }
        const targets = [...edits, ...deletes]
        // Edits and deletes are rare: only a batch with some carries the part that marks their targets,
        // found by id. The moved conversations are a filter the index cannot use (`IS TRUE`): as an
        // index condition they could make the plan read every activity of each conversation written.
        const marks = targets.length === 0 ? writer.literal("") : writer`, marked AS (
            UPDATE activities a
            SET edited_at = CASE WHEN a.id = ANY(${edits}::uuid[]) THEN now() ELSE a.edited_at END,
                deleted_at = CASE WHEN a.id = ANY(${deletes}::uuid[]) THEN COALESCE(a.deleted_at, now()) ELSE a.deleted_at END
            WHERE a.id = ANY(${targets}::uuid[]) AND (a.conversation_id = ANY(ARRAY(SELECT id FROM moved))) IS TRUE
          )`
        const answer = yield* writer<{ id: string; at: string | null; outcome: "moved" | "key_taken" | "late" | "key_refused" }>`${
          writer.literal(prepared(targets.length === 0 ? "append_batch" : "append_batch_with_marks"))
        }
          WITH heads AS (
            SELECT * FROM jsonb_to_recordset(${JSON.stringify(heads)}::jsonb)
                     AS v(id uuid, old_head int8, new_head int8, status text, deadline int8, key_checks jsonb)
          ), late AS (
            -- The fence of WriteTimings: a statement PostgreSQL starts past a group's deadline (it
            -- waited in a stalled backend, say) writes nothing of it, whenever it runs.
            SELECT id FROM heads WHERE statement_timestamp() > to_timestamp(deadline / 1000.0)
          ), refused AS (
            -- API keys taken from a node's recent lookups are checked where the write commits: one
            -- revoked, expired or of a tenant no longer active writes nothing (ADR 0015).
            SELECT v.id FROM heads v
            WHERE v.id NOT IN (SELECT id FROM late) AND EXISTS (
              SELECT 1 FROM jsonb_array_elements_text(v.key_checks) AS k(id)
              WHERE NOT EXISTS (SELECT 1 FROM api_keys ak JOIN tenants t ON t.id = ak.tenant_id
                                WHERE ak.id = k.id::uuid AND ak.revoked_at IS NULL
                                  AND (ak.expires_at IS NULL OR ak.expires_at > now()) AND t.status = 'active'))
          ), known AS (
            -- One index probe per key: a join here may be planned as a scan of the whole index.
            SELECT DISTINCT k.conversation_id
            FROM UNNEST(${keyedConversations}::uuid[], ${keys}::text[])
                 AS k(conversation_id, key),
                 LATERAL (SELECT 1 FROM activities a
                          WHERE a.conversation_id = k.conversation_id AND a.idempotency_key = k.key LIMIT 1) AS stored_key
          ), moved AS (
            UPDATE conversations c
            SET head_seq = v.new_head, updated_at = now(),
                status = COALESCE(v.status, c.status),
                closed_at = CASE WHEN v.status = 'closed' THEN now() WHEN v.status = 'active' THEN NULL ELSE c.closed_at END
            FROM heads v
            WHERE c.id = ANY(${groups.map((g) => g.conversationId)}::uuid[]) AND c.id = v.id AND c.head_seq = v.old_head
              AND c.id NOT IN (SELECT conversation_id FROM known) AND c.id NOT IN (SELECT id FROM late)
              AND c.id NOT IN (SELECT id FROM refused)
            RETURNING c.id
          ), clock AS (
            SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at
          ), stored AS (
            INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text, attachments, metadata,
                                    idempotency_key, reply_to_id, message_type, payload, source_channel_id)
            SELECT t.conversation_id, t.seq, t.id, t.tenant_id, t.type, t.sender, t.text, t.attachments, t.metadata,
                   t.idempotency_key, t.reply_to_id, t.message_type, t.payload, t.source_channel_id
            FROM jsonb_to_recordset(${encoded.rows}::jsonb)
                 AS t(conversation_id uuid, seq int8, id uuid, tenant_id uuid, type text, sender text, text text,
                      attachments jsonb, metadata jsonb, idempotency_key text, reply_to_id uuid, message_type text,
                      payload jsonb, source_channel_id uuid)
            WHERE t.conversation_id IN (SELECT id FROM moved)
          ), planned AS (
            INSERT INTO deliveries (id, tenant_id, activity_id, conversation_id, channel_id, payload, next_attempt_at)
            SELECT t.id, t.tenant_id, t.activity_id, t.conversation_id, t.channel_id,
                   jsonb_set(t.payload, '{inserted_at}', to_jsonb((SELECT at FROM clock))), now()
            FROM jsonb_to_recordset(${encoded.planned}::jsonb)
                 AS t(id uuid, tenant_id uuid, activity_id uuid, conversation_id uuid, channel_id uuid, payload jsonb)
            WHERE t.conversation_id IN (SELECT id FROM moved)
              AND EXISTS (SELECT 1 FROM channels ch WHERE ch.id = t.channel_id AND ch.mode <> 'inbound')
          )${marks}
          SELECT moved.id, clock.at, 'moved' AS outcome FROM moved, clock
          UNION ALL
          SELECT id, NULL, 'late' FROM late
          UNION ALL
          SELECT id, NULL, 'key_refused' FROM refused
          UNION ALL
          SELECT conversation_id, NULL, 'key_taken' FROM known
          WHERE conversation_id NOT IN (SELECT id FROM late) AND conversation_id NOT IN (SELECT id FROM refused)`
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
      }).pipe(
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
    const writeBatch = (batch: ReadonlyArray<Pending>, encoded: ReturnType<typeof encodeRows>) =>
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

    const findActivities = SqlSchema.findAll({
      Request: Schema.Struct({
        tenantId: Schema.String,
        conversationId: Schema.String,
        ids: Schema.Array(Schema.String),
        keys: Schema.Array(Schema.String)
      }),
      Result: ActivityFromRow,
      execute: ({ conversationId, ids, keys, tenantId }) =>
        sql`SELECT ${sql.literal(ACTIVITY_COLUMNS)} FROM activities
            WHERE conversation_id = ${conversationId} AND tenant_id = ${tenantId}
              AND (id = ANY(${ids}::uuid[]) OR idempotency_key = ANY(${keys}::text[]))`
    })

    /**
     * Activities of the tenant's conversation already stored under any of these ids or idempotency
     * keys (another tenant's conversation has none).
     */
    const findExisting = (tenantId: string, conversationId: string, ids: ReadonlyArray<string>, keys: ReadonlyArray<string>) =>
      findActivities({ tenantId, conversationId, ids, keys })

    /**
     * `findExisting` once no write of the conversation is in flight, within the tenant's own rows: a
     * caller not yet checked against the conversation (an append whose answer was lost) neither waits
     * on another tenant's conversation nor sees its activities, so it is answered as for a missing one.
     * A write holds the conversation's row from its head update to its commit, so waiting for that row
     * first makes visible a commit PostgreSQL was still holding up (a stalled WAL flush); past
     * `IN_FLIGHT_WAIT_MS` this fails, and the outcome of such a write is not known yet.
     */
    const findSettled = (
      tenantId: string,
      conversationId: string,
      ids: ReadonlyArray<string>,
      keys: ReadonlyArray<string>
    ) =>
      inTransaction(sql)(
        sql`SELECT set_config('lock_timeout', ${`${IN_FLIGHT_WAIT_MS}ms`}, true)`.pipe(
          Effect.zipRight(
            sql`SELECT 1 FROM conversations WHERE id = ${conversationId} AND tenant_id = ${tenantId} FOR SHARE`
          ),
          // A statement of its own: its snapshot is taken after the wait.
          Effect.zipRight(findActivities({ tenantId, conversationId, ids, keys }))
        )
      )

    /**
     * The tenant's conversation's status once no write of it is in flight (as `findSettled` waits),
     * for a close or reopen whose answer was lost; undefined when there is no such conversation.
     */
    const statusSettled = (tenantId: string, conversationId: string) =>
      inTransaction(sql)(
        sql`SELECT set_config('lock_timeout', ${`${IN_FLIGHT_WAIT_MS}ms`}, true)`.pipe(
          // After the wait, FOR SHARE reads the row as the write left it.
          Effect.zipRight(sql<{ status: string }>`
            SELECT status FROM conversations WHERE id = ${conversationId} AND tenant_id = ${tenantId} FOR SHARE`),
          Effect.map((rows) => rows[0]?.status)
        )
      )

    const readRange = SqlSchema.findAll({
      Request: Schema.Struct({ conversationId: Schema.String, after: Schema.Number, limit: Schema.Number }),
      Result: ActivityFromRow,
      execute: ({ after, conversationId, limit }) =>
        sql`SELECT ${sql.literal(ACTIVITY_COLUMNS)} FROM activities
            WHERE conversation_id = ${conversationId} AND seq > ${after}
            ORDER BY seq LIMIT ${limit}`
    })

    /** Up to `limit` activities with seq above `after`, oldest first. */
    const readAfter = (conversationId: string, after: number, limit: number) =>
      readRange({ conversationId, after, limit })

    const findDeleted = SqlSchema.findAll({
      Request: Schema.Struct({ conversationId: Schema.String, ids: Schema.Array(Schema.String) }),
      Result: Schema.Struct({ id: Schema.String }),
      execute: ({ conversationId, ids }) =>
        sql`SELECT id FROM activities
            WHERE conversation_id = ${conversationId} AND id = ANY(${ids}::uuid[]) AND deleted_at IS NOT NULL`
    })

    /** Which of these activities of the conversation are deleted messages. */
    const deletedAmong = (conversationId: string, ids: ReadonlyArray<string>) =>
      Effect.map(findDeleted({ conversationId, ids }), (rows): ReadonlySet<string> => new Set(rows.map((row) => row.id)))

    const HeadRow = Schema.Struct({ id: Schema.String, head_seq: Schema.NumberFromString })
    const findHeads = SqlSchema.findAll({
      Request: Schema.Array(Schema.String),
      Result: HeadRow,
      execute: (ids) => sql`SELECT id, head_seq FROM conversations WHERE id = ANY(${ids}::uuid[])`
    })

    /** The committed head seqs of these conversations, by id (missing ones are absent). */
    const headsOf = (conversationIds: ReadonlyArray<string>) =>
      Effect.map(findHeads(conversationIds), (rows) => new Map(rows.map((row) => [row.id, row.head_seq])))

    /** The committed head seq of a conversation (0 when it has none or does not exist). */
    const headOf = (conversationId: string) =>
      Effect.map(headsOf([conversationId]), (heads) => heads.get(conversationId) ?? 0)

    return { write, findExisting, findSettled, statusSettled, deletedAmong, readAfter, headOf, headsOf } as const
  })
}) {}

