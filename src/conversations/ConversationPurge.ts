import { SqlClient } from "@effect/sql"
import { Duration, Effect, Layer } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { JobRunner } from "../ops/JobRunner.js"

/** Activities (and their deliveries) deleted per statement: short transactions, bounded WAL. */
const CHUNK = 1000
/** Queued conversations one statement takes: small ones are purged many at a time (ADR 0008). */
const TARGETS = 50
/** Uploaded files deleted per statement: each may be as large as `UPLOAD_MAX_BYTES`. */
const BLOBS = 20
/** Chunks per run, so one run of a large backlog does not hold the job for long. */
const CHUNKS_PER_RUN = 200

/**
 * Purges what deleted conversations left behind, one chunk per statement (ADR 0008). A chunk dequeues
 * the conversations it emptied: its last only when the chunk was short, none when its files hit `BLOBS`.
 */
export class ConversationPurge extends Effect.Service<ConversationPurge>()("parley/ConversationPurge", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** One chunk; false when no conversation was waiting (or every waiting one is being purged). */
    const purgeChunk = Effect.map(
      sql<{ taken: number }>`
        WITH target AS (
          SELECT conversation_id FROM conversation_purges ORDER BY conversation_id LIMIT ${TARGETS} FOR UPDATE SKIP LOCKED
        ), chunk AS (
          SELECT target.conversation_id, first.seq, first.id
          FROM target, LATERAL (SELECT a.seq, a.id FROM activities a WHERE a.conversation_id = target.conversation_id
                                ORDER BY a.seq LIMIT ${CHUNK}) AS first
          ORDER BY target.conversation_id, first.seq LIMIT ${CHUNK}
        ), deliveries_gone AS (
          DELETE FROM deliveries d USING chunk WHERE d.activity_id = chunk.id
        ), activities_gone AS (
          DELETE FROM activities a USING chunk WHERE a.conversation_id = chunk.conversation_id AND a.seq = chunk.seq
        ), read_positions_gone AS (
          DELETE FROM read_positions r USING target WHERE r.conversation_id = target.conversation_id
        ), blobs_gone AS (
          DELETE FROM blobs b WHERE b.id IN (
            SELECT blob.id FROM target JOIN blobs blob ON blob.conversation_id = target.conversation_id LIMIT ${BLOBS}
          ) RETURNING 1
        ), dequeued AS (
          DELETE FROM conversation_purges p USING target
          WHERE p.conversation_id = target.conversation_id
            AND (SELECT count(*) FROM blobs_gone) < ${BLOBS}
            AND ((SELECT count(*) FROM chunk) < ${CHUNK} OR target.conversation_id < (SELECT conversation_id FROM chunk ORDER BY conversation_id DESC LIMIT 1))
        )
        SELECT count(*)::int AS taken FROM target`,
      (rows) => (rows[0]?.taken ?? 0) > 0
    )

    /** Purges until nothing is waiting or `maxChunks` statements ran. */
    const purge = (maxChunks: number) =>
      Effect.iterate({ chunks: 0, more: true }, {
        while: ({ chunks, more }) => more && chunks < maxChunks,
        body: ({ chunks }) => Effect.map(purgeChunk, (more) => ({ chunks: chunks + 1, more }))
      }).pipe(Effect.asVoid)

    /** Conversations deleted whose rows are not purged yet. */
    const backlog = Effect.map(
      sql<{ n: number }>`SELECT count(*)::int AS n FROM conversation_purges`,
      (rows) => rows[0]?.n ?? 0
    )

    return { purge, backlog } as const
  })
}) {}

/** Runs the purge every `PURGE_INTERVAL_SECONDS` on every node; they share the queue safely. */
export const ConversationPurgeLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const jobs = yield* JobRunner
    const purge = yield* ConversationPurge
    yield* jobs.every("purge_deleted_conversations", Duration.seconds(config.purgeIntervalSeconds), purge.purge(CHUNKS_PER_RUN))
  })
)
