import { SqlClient } from "@effect/sql"
import { Duration, Effect, Exit, Ref } from "effect"
import { AppConfig } from "../config/AppConfig.js"
import { DatabasePool } from "../db/Database.js"
import { POOL_WAIT_WINDOW_MS } from "../db/MeasuredPool.js"
import { migrations } from "../db/Migrations.js"
import { JobRunner } from "./JobRunner.js"
import { Lifecycle } from "./Lifecycle.js"

type Check = "ok" | "error"

/** The readiness report of server-apis.md "Health probes". */
export interface ReadinessReport {
  readonly status: "ready" | "draining" | "degraded" | "unavailable"
  readonly checks: {
    readonly database: Check
    readonly oban: Check
    readonly draining: Check
    readonly migrations: Check
    readonly pool: Check
  }
  readonly reasons: ReadonlyArray<string>
}

/**
 * The `pool` check: checkouts that waited `limitMs` or more on average over `POOL_WAIT_WINDOW_MS` make the
 * node `degraded`; a limit of 0 turns the check off.
 */
export const poolCheck = (averageWaitMs: number, limitMs: number): Check =>
  limitMs > 0 && averageWaitMs >= limitMs ? "error" : "ok"
const DATABASE_TIMEOUT = Duration.seconds(1)
/** How long one database check answers every probe: a burst of probes costs one check, not a pool. */
const DATABASE_CHECK_TTL = Duration.seconds(1)

const shippedMigrationIds = Object.keys(migrations).map((name) => Number(name.split("_")[0]))

export class Readiness extends Effect.Service<Readiness>()("parley/Readiness", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { pool } = yield* DatabasePool
    const lifecycle = yield* Lifecycle
    const jobs = yield* JobRunner
    const { readinessPoolWaitMs } = yield* AppConfig

    // Disconnected: on a silent server, the interrupted query's cancellation takes seconds to
    // give up, and the probe answers without waiting for it.
    const probe = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      effect.pipe(
        Effect.disconnect,
        Effect.timeout(DATABASE_TIMEOUT),
        Effect.exit,
        Effect.map((exit): Check => Exit.isSuccess(exit) ? "ok" : "error")
      )

    // Seen once, for good: a migration is never unapplied. Read again, the table would block the
    // probe whenever a node of a newer build migrates (its migrator holds the table locked until
    // its migrations commit), and every node of the older build would report itself unavailable.
    const allApplied = yield* Ref.make(false)
    const migrationsApplied = Effect.flatMap(Ref.get(allApplied), (seen) =>
      seen ? Effect.void : sql<{ migration_id: number }>`SELECT migration_id FROM effect_sql_migrations`.pipe(
        Effect.flatMap((rows) => {
          const applied = new Set(rows.map((r) => Number(r.migration_id)))
          return shippedMigrationIds.every((id) => applied.has(id)) ? Ref.set(allApplied, true) : Effect.fail("pending")
        })
      ))

    // Probes while a check runs wait for it. Draining and jobs are read fresh: a drain shows at once.
    const databaseChecks = yield* Effect.cachedWithTTL(
      Effect.all([probe(sql`SELECT 1`), probe(migrationsApplied)], { concurrency: "unbounded" }),
      DATABASE_CHECK_TTL
    )

    const check = Effect.gen(function*() {
      const [[database, migrationsCheck], draining, running] = yield* Effect.all([
        databaseChecks,
        lifecycle.isDraining,
        jobs.isRunning
      ], { concurrency: "unbounded" })
      const checks = {
        database,
        // server-apis.md names the job-runner check `oban`.
        oban: running ? "ok" : "error",
        draining: draining ? "error" : "ok",
        migrations: migrationsCheck,
        pool: poolCheck(pool.averageWaitMs(POOL_WAIT_WINDOW_MS), readinessPoolWaitMs)
      } as const
      const reasons = Object.entries(checks).filter(([, v]) => v === "error").map(([k]) => k)
      const status: ReadinessReport["status"] = reasons.length === 0
        ? "ready"
        : draining
        ? "draining"
        : reasons.length === 1 && reasons[0] === "pool"
        ? "degraded"
        : "unavailable"
      return { status, checks, reasons } satisfies ReadinessReport
    })
    return { check } as const
  })
}) {}
