import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { JobRunner } from "./JobRunner.js"

/** Audit rows one statement deletes: each stays far within the statement timeout, whatever the log's size. */
const AUDIT_PRUNE_CHUNK = 10_000
/** Chunks one run deletes at most; what is left waits for the next run. */
const AUDIT_PRUNE_CHUNKS_PER_RUN = 100

/**
 * Deletes audit rows older than `retentionDays` (0 keeps them forever), oldest first, a chunk per
 * statement; returns how many it deleted.
 */
export const pruneAuditLog = (retentionDays: number) =>
  Effect.gen(function*() {
    if (retentionDays === 0) return 0
    const sql = yield* SqlClient.SqlClient
    let deleted = 0
    for (let chunk = 0; chunk < AUDIT_PRUNE_CHUNKS_PER_RUN; chunk++) {
      const [row] = yield* sql<{ n: number }>`
        WITH pruned AS (
          DELETE FROM audit_log WHERE id IN (
            SELECT id FROM audit_log WHERE inserted_at < now() - make_interval(days => ${retentionDays})
            ORDER BY inserted_at LIMIT ${AUDIT_PRUNE_CHUNK}
          )
          RETURNING 1
        )
        SELECT count(*)::int AS n FROM pruned`
      const pruned = row?.n ?? 0
      deleted += pruned
      if (pruned < AUDIT_PRUNE_CHUNK) break
    }
    return deleted
  })

/** Periodic clean-up of rows whose time is up. */
export const HousekeepingLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const jobs = yield* JobRunner
    const config = yield* AppConfig
    yield* jobs.every(
      "prune_expired_sessions",
      "10 minutes",
      sql`DELETE FROM portal_sessions WHERE expires_at < now()`.pipe(Effect.asVoid)
    )
    yield* jobs.every("prune_audit_log", "1 hour", Effect.asVoid(pruneAuditLog(config.auditRetentionDays)))
  })
)
