import { SqlClient } from "@effect/sql"
import { Deferred, Duration, Effect, Exit, FiberId, Option, Schedule, Schema } from "effect"
import { Counter } from "prom-client"
import { answerWithin } from "../concurrency/WorkQueue.js"
import { AppConfig } from "../config/AppConfig.js"
import { boundedClient } from "../db/Database.js"
import { RateLimited } from "../domain/ApiError.js"
import { type Bucket, defaultWindows, type OverridableBucket, TenantLimits } from "../domain/RateLimit.js"
import { JobRunner } from "../ops/JobRunner.js"
import { Metrics } from "../ops/Metrics.js"

interface Window {
  readonly limit: number
  readonly scale_ms: number
}

interface Slot {
  readonly bucket: Bucket
  readonly key: string
  readonly windowStart: number
  readonly windowEnd: number
  /** Accepted by this node in the window. */
  local: number
  /** `local` as the shared table last stored it. */
  written: number
  /** What the other nodes had counted at the last read. */
  others: number
  /** When the last read of `others` started (`-Infinity`: never read). */
  readAt: number
  /** When it was last decided on; syncs read `others` while that is recent. */
  usedAt: number
  /** Set while the slot reads `others` before a decision; decisions wait for it. */
  learning: Deferred.Deferred<void> | undefined
}

const OVERRIDABLE: ReadonlySet<string> = new Set<OverridableBucket>([
  "activity_create",
  "upload",
  "inbound",
  "token_generate",
  "publishable_token"
])

/** The counters' own connections: the sync and the reads decisions wait for. */
const COUNTER_CONNECTIONS = 2
/** A tenant's overrides are at most this old when a limit is decided. */
const TENANT_LIMITS_TTL_MS = 1000
/** How long a decision waits for a database read (overrides, another node's count) before going on without it. */
const READ_WAIT_MS = 1000
/**
 * A window decided on within this time is read at every sync; one left alone longer is read again
 * before its next decision instead (a key used now and then costs a read per use, not ten a second).
 */
const READ_WHILE_USED_MS = 5_000
/** Shared counters are kept this long past their window's end, for nodes whose clocks run behind. */
const PRUNE_GRACE_MS = 60_000

/** Slots as the parallel arrays a statement unnests. */
const windowColumns = (slots: ReadonlyArray<Slot>) => ({
  buckets: slots.map((s) => s.bucket),
  keys: slots.map((s) => s.key),
  starts: slots.map((s) => s.windowStart),
  ends: slots.map((s) => s.windowEnd)
})

const decodeTenantLimits = Schema.decodeUnknownOption(TenantLimits)

/** Deletes the shared counters of windows that ended (a grace period ago) at the time it runs. */
export const pruneCounters = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.suspend(() => sql`DELETE FROM rate_limit_counters WHERE window_end < ${Date.now() - PRUNE_GRACE_MS}`)).pipe(
    Effect.asVoid
  )

/**
 * Fixed-window rate limits (client-api.md "Limits"), windows aligned to wall-clock time. Each node
 * decides from what it accepted in the window plus what the other nodes had counted when it last
 * looked, and every `RATE_LIMIT_SYNC_MS` writes its own count to a shared table (one row per node
 * and window) and reads the others' for the windows it used since; so a burst overshoots by at most
 * what the other nodes accept within one interval.
 */
export class RateLimiter extends Effect.Service<RateLimiter>()("parley/RateLimiter", {
  scoped: Effect.gen(function*() {
    const config = yield* AppConfig
    // Connections of its own, each statement bounded: a stalled one is closed, not handed to the
    // next sync to queue behind (the main pool would give it back).
    const { client: sql } = yield* boundedClient(COUNTER_CONNECTIONS, {
      connectMs: READ_WAIT_MS,
      statementMs: READ_WAIT_MS,
      queryMs: READ_WAIT_MS + 500
    })
    const jobs = yield* JobRunner
    const metrics = yield* Metrics
    const rejections = new Counter({
      name: "parley_rate_limit_rejections_total",
      help: "Requests refused by a rate limit, by bucket",
      labelNames: ["bucket"] as const,
      registers: [metrics.registry]
    })
    const installation: { readonly [B in Bucket]?: Window | undefined } = Option.getOrElse(config.rateLimits, () => ({}))
    const slots = new Map<string, Slot>()
    type Overrides = { readonly [B in OverridableBucket]?: Window | undefined }
    const tenantLimits = new Map<string, { readonly at: number; readonly limits: Overrides }>()
    const reading = new Map<string, Deferred.Deferred<Overrides>>()
    const scope = yield* Effect.scope
    // This node's rows in the shared table; a restarted node counts as a new one (its old rows still count).
    const node = crypto.randomUUID()
    // When the last sync started; a slot last read before that was not read by it.
    let lastSyncAt = 0

    /**
     * Reads the tenant's overrides. When the database does not answer in time the last ones read
     * stay in force (none for a tenant never read) until the next attempt, a TTL later.
     */
    const loadOverrides = (tenantId: string) =>
      sql<{ limits: unknown }>`SELECT limits FROM tenants WHERE id = ${tenantId}`.pipe(
        Effect.map((rows): Overrides => Option.getOrElse(decodeTenantLimits(rows[0]?.limits ?? {}), () => ({}))),
        // Not waiting for the query's cancellation either: on a silent connection that takes seconds.
        (read) => answerWithin(read, READ_WAIT_MS, () => "slow" as const),
        Effect.orElseSucceed((): Overrides => tenantLimits.get(tenantId)?.limits ?? {}),
        Effect.tap((limits) => Effect.sync(() => tenantLimits.set(tenantId, { at: Date.now(), limits })))
      )

    /**
     * The tenant's overrides, at most a TTL old: a stale entry is read again before the decision, by
     * one read that every request arriving meanwhile waits for. A busy tenant costs one query a TTL.
     */
    const overrideOf = (tenantId: string): Effect.Effect<Overrides> =>
      Effect.suspend(() => {
        const cached = tenantLimits.get(tenantId)
        if (cached !== undefined && Date.now() - cached.at < TENANT_LIMITS_TTL_MS) return Effect.succeed(cached.limits)
        const pending = reading.get(tenantId)
        if (pending !== undefined) return Deferred.await(pending)
        const read = Deferred.unsafeMake<Overrides>(FiberId.none)
        reading.set(tenantId, read)
        // In a fiber of its own: an interrupted first caller must not leave the others waiting.
        return loadOverrides(tenantId).pipe(
          Effect.exit,
          Effect.flatMap((exit) => Deferred.done(read, exit)),
          Effect.ensuring(Effect.sync(() => reading.delete(tenantId))),
          Effect.forkIn(scope),
          Effect.zipRight(Deferred.await(read))
        )
      })

    /** Tenant override, then `RATE_LIMITS`, then the built-in default. */
    const windowOf = (bucket: Bucket, tenantId: string | null): Effect.Effect<Window> => {
      const fallback = installation[bucket] ?? defaultWindows[bucket]
      return tenantId !== null && OVERRIDABLE.has(bucket)
        ? Effect.map(overrideOf(tenantId), (overrides) => overrides[bucket as OverridableBucket] ?? fallback)
        : Effect.succeed(fallback)
    }

    const slotId = (bucket: string, key: string, windowStart: number | string, windowEnd: number | string) =>
      `${bucket}\u0000${key}\u0000${windowStart}\u0000${windowEnd}`

    /** Accepts the event if the window has room, or fails with the time left in it. */
    const decide = (slot: Slot, limit: number) => {
      slot.usedAt = Date.now()
      if (slot.local + slot.others >= limit) {
        rejections.inc({ bucket: slot.bucket })
        return Effect.fail(
          new RateLimited({
            message: `rate limit ${slot.bucket} exceeded`,
            retry_after_ms: Math.max(1, slot.windowEnd - Date.now())
          })
        )
      }
      slot.local += 1
      return Effect.void
    }

    /** What the other nodes have counted in the slot's window so far. */
    const learn = (slot: Slot, learned: Deferred.Deferred<void>) =>
      Effect.suspend(() => {
        const startedAt = Date.now()
        const read = sql<{ others: string }>`
          SELECT COALESCE(sum(count), 0) AS others FROM rate_limit_counters
          WHERE bucket = ${slot.bucket} AND key = ${slot.key}
            AND window_start = ${slot.windowStart} AND window_end = ${slot.windowEnd} AND node <> ${node}`
        return answerWithin(read, READ_WAIT_MS, () => "slow" as const).pipe(
          Effect.tap((rows) => Effect.sync(() => (slot.others = Math.max(slot.others, Number(rows[0]?.others ?? 0))))),
          Effect.catchAllCause((cause) => Effect.logWarning("rate limit count could not be read; deciding locally", cause)),
          // Looked at, read or not: a failed read is not tried again before the next sync succeeds.
          Effect.ensuring(Effect.sync(() => {
            slot.readAt = startedAt
            slot.learning = undefined
          }))
        )
      }).pipe(
        Effect.ensuring(Deferred.done(learned, Exit.void)),
        Effect.forkIn(scope)
      )

    /**
     * Counts one event in the window, or fails with the time left in it. A slot the last sync did
     * not read (new to this node, or unused for a while) learns the other nodes' count before
     * deciding, once its window has run for a sync interval: they may have filled the window long
     * before, and waiting for the next sync would let a whole limit through again.
     */
    const count = (bucket: Bucket, key: string, window: Window): Effect.Effect<void, RateLimited> => {
      const now = Date.now()
      const windowStart = Math.floor(now / window.scale_ms) * window.scale_ms
      const windowEnd = windowStart + window.scale_ms
      const id = slotId(bucket, key, windowStart, windowEnd)
      let slot = slots.get(id)
      if (slot === undefined) {
        slot = { bucket, key, windowStart, windowEnd, local: 0, written: 0, others: 0, readAt: -Infinity, usedAt: now, learning: undefined }
        slots.set(id, slot)
      }
      const joined = slot
      if (slot.learning === undefined && slot.readAt < lastSyncAt && now - windowStart >= config.rateLimitSyncMs) {
        const learned = Deferred.unsafeMake<void>(FiberId.none)
        slot.learning = learned
        return learn(joined, learned).pipe(
          Effect.zipRight(Deferred.await(learned)),
          Effect.zipRight(Effect.suspend(() => decide(joined, window.limit)))
        )
      }
      if (slot.learning !== undefined) {
        return Effect.zipRight(Deferred.await(slot.learning), Effect.suspend(() => decide(joined, window.limit)))
      }
      return decide(slot, window.limit)
    }

    /**
     * Counts one event for `key` in `bucket`, or fails with 429 `rate_limited` and the time left in
     * the window. `tenantId` selects the tenant's overrides for the overridable buckets. On every
     * request, so plain functions rather than generators.
     */
    const consume = (bucket: Bucket, key: string, tenantId: string | null) =>
      Effect.flatMap(windowOf(bucket, tenantId), (window) => count(bucket, key, window))

    // After a failed sync every count is written again: the database may have restarted and lost
    // the unlogged table. Writing an unchanged count leaves no row version behind.
    let rewriteAll = false

    /**
     * Writes this node's count of every window it accepted more in, and reads the other nodes'
     * counts of the windows it decided on recently. Counts are absolute, so a sync whose answer was
     * lost is simply written again; windows left alone are neither written nor read (a key seen
     * once costs nothing more).
     */
    const sync = Effect.suspend(() => {
      const startedAt = Date.now()
      for (const [id, slot] of slots) if (slot.windowEnd <= startedAt) slots.delete(id)
      const writes: Array<Slot> = []
      const reads: Array<Slot> = []
      for (const slot of slots.values()) {
        if (slot.local > slot.written || (rewriteAll && slot.local > 0)) writes.push(slot)
        if (startedAt - slot.usedAt <= READ_WHILE_USED_MS) reads.push(slot)
      }
      // Nothing to exchange: no statement, and nothing learned about the database (`false`).
      if (writes.length === 0 && reads.length === 0) {
        return Effect.sync(() => {
          lastSyncAt = startedAt
          return false
        })
      }
      const counts = writes.map((slot) => slot.local)
      const w = windowColumns(writes)
      const r = windowColumns(reads)
      return sql<{ bucket: string; key: string; window_start: string; window_end: string; others: string }>`
        WITH written AS (
          INSERT INTO rate_limit_counters (bucket, key, window_start, window_end, node, count)
          SELECT bucket, key, window_start, window_end, ${node}, count
          FROM UNNEST(${w.buckets}::text[], ${w.keys}::text[], ${w.starts}::int8[], ${w.ends}::int8[], ${counts}::int8[])
               AS l(bucket, key, window_start, window_end, count)
          ON CONFLICT (bucket, key, window_start, window_end, node)
          DO UPDATE SET count = EXCLUDED.count WHERE rate_limit_counters.count < EXCLUDED.count
        )
        SELECT c.bucket, c.key, c.window_start, c.window_end, sum(c.count) AS others
        FROM UNNEST(${r.buckets}::text[], ${r.keys}::text[], ${r.starts}::int8[], ${r.ends}::int8[])
             AS l(bucket, key, window_start, window_end)
        JOIN rate_limit_counters c USING (bucket, key, window_start, window_end)
        WHERE c.node <> ${node}
        GROUP BY c.bucket, c.key, c.window_start, c.window_end`.pipe(
        // Not waiting for the statement's cancellation: a silent connection must not stop the syncs.
        (statement) => answerWithin(statement, READ_WAIT_MS, () => new Error("the rate limit sync timed out")),
        Effect.tapError(() => Effect.sync(() => (rewriteAll = true))),
        Effect.map((rows) => {
          rewriteAll = false
          writes.forEach((slot, i) => (slot.written = Math.max(slot.written, counts[i]!)))
          const others = new Map(rows.map((row) => [slotId(row.bucket, row.key, row.window_start, row.window_end), Number(row.others)]))
          for (const slot of reads) {
            slot.others = Math.max(slot.others, others.get(slotId(slot.bucket, slot.key, slot.windowStart, slot.windowEnd)) ?? 0)
            slot.readAt = startedAt
          }
          // A failed sync leaves it: while the database is away, decisions are local.
          lastSyncAt = startedAt
          return true
        })
      )
    })

    // Many syncs a second: while the database is away, one line when syncing stops and one when it is back.
    let failing = false
    yield* Effect.forkScoped(
      sync.pipe(
        Effect.matchCauseEffect({
          onFailure: (cause) =>
            failing ? Effect.void : Effect.zipRight(
              Effect.sync(() => (failing = true)),
              Effect.logWarning("rate limit sync failed; counting locally until it succeeds", cause)
            ),
          onSuccess: (reachedDatabase) =>
            failing && reachedDatabase
              ? Effect.zipRight(Effect.sync(() => (failing = false)), Effect.logInfo("rate limit sync recovered"))
              : Effect.void
        }),
        // Twice per interval: another node's count reaches this one through its write and then this
        // node's read, each up to a period late, so what a node knows of the others is at most one
        // interval old (and a sync's duration), as the documented overshoot bound says.
        Effect.repeat(Schedule.fixed(Duration.millis(config.rateLimitSyncMs / 2)))
      )
    )
    yield* jobs.every("prune_rate_limit_counters", "1 minute", pruneCounters)
    // Tenants not seen for a minute are forgotten: the map would otherwise hold every tenant ever served.
    yield* Effect.forkScoped(Effect.sync(() => {
      const cutoff = Date.now() - 60_000
      for (const [tenantId, { at }] of tenantLimits) if (at < cutoff) tenantLimits.delete(tenantId)
    }).pipe(Effect.repeat(Schedule.spaced(Duration.minutes(1)))))

    return { consume } as const
  })
}) {}
