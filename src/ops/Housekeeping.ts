import { SqlClient } from "@effect/sql"
import { Effect, Layer } from "effect"
import { JobRunner } from "./JobRunner.js"

/** Audit rows are kept this long (server-apis.md "Limits": 365 days by default). */
export const AUDIT_RETENTION_DAYS = 365

/** Periodic clean-up of rows whose time is up. */
export const HousekeepingLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const jobs = yield* JobRunner
    yield* jobs.every(
      "prune_expired_sessions",
      "10 minutes",
      sql`DELETE FROM portal_sessions WHERE expires_at < now()`.pipe(Effect.asVoid)
    )
    yield* jobs.every(
      "prune_audit_log",
      "1 hour",
      sql`DELETE FROM audit_log WHERE inserted_at < now() - make_interval(days => ${AUDIT_RETENTION_DAYS})`.pipe(
        Effect.asVoid
      )
    )
  })
)
