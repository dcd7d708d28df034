import { SqlClient } from "@effect/sql"
import { Deferred, Duration, Effect, Exit, FiberId, Option, Schedule, Schema } from "effect"
import { Counter } from "prom-client"
import { AppConfig } from "../config/AppConfig.js"
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
  /** Accepted here and not yet added to the shared counter. */
  unsynced: number
  /** The cluster's total at the last sync (including what this node had synced). */
  synced: number
  /** Set while a slot made late in its window learns the cluster's count; decisions wait for it. */
  learning: Deferred.Deferred<void> | undefined
}

const OVERRIDABLE: ReadonlySet<string> = new Set<OverridableBucket>([
  "activity_create",
  "upload",
  "inbound",
  "token_generate",
  "publishable_token"
])

/** A tenant's overrides are at most this old when a limit is decided. */
const TENANT_LIMITS_TTL_MS = 1000
/** How long a decision waits for a database read (overrides, another node's count) before going on without it. */
const READ_WAIT_MS = 1000
/** Shared counters are kept this long past their window's end, for nodes whose clocks run behind. */
const PRUNE_GRACE_MS = 60_000

const decodeTenantLimits = Schema.decodeUnknownOption(TenantLimits)

/** Deletes the shared counters of windows that ended (a grace period ago) at the time it runs. */
export const pruneCounters = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.suspend(() => sql`DELETE FROM rate_limit_counters WHERE window_end < ${Date.now() - PRUNE_GRACE_MS}`)).pipe(
    Effect.asVoid
  )

/**
 * Fixed-window rate limits (client-api.md "Limits"), windows aligned to wall-clock time. Each node
 * decides from the cluster-wide count it last saw plus what it accepted since, and adds its own
 * count to a shared table every `RATE_LIMIT_SYNC_MS`; so a burst overshoots by at most what the
 * other nodes accept within one interval.
 */
export class RateLimiter extends Effect.Service<RateLimiter>()("parley/RateLimiter", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
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

    /**
     * Reads the tenant's overrides. When the database does not answer in time the last ones read
     * stay in force (none for a tenant never read) until the next attempt, a TTL later.
     */
    const loadOverrides = (tenantId: string) =>
      sql<{ limits: unknown }>`SELECT limits FROM tenants WHERE id = ${tenantId}`.pipe(
        Effect.map((rows): Overrides => Option.getOrElse(decodeTenantLimits(rows[0]?.limits ?? {}), () => ({}))),
        Effect.timeoutFail({ duration: READ_WAIT_MS, onTimeout: () => "slow" as const }),
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
      if (slot.synced + slot.unsynced >= limit) {
        rejections.inc({ bucket: slot.bucket })
        return Effect.fail(
          new RateLimited({
            message: `rate limit ${slot.bucket} exceeded`,
            retry_after_ms: Math.max(1, slot.windowEnd - Date.now())
          })
        )
      }
      slot.unsynced += 1
      return Effect.void
    }

    /** What the other nodes have counted in the slot's window so far. */
    const learn = (slot: Slot, learned: Deferred.Deferred<void>) =>
      sql<{ count: string }>`
        SELECT count FROM rate_limit_counters
        WHERE bucket = ${slot.bucket} AND key = ${slot.key}
          AND window_start = ${slot.windowStart} AND window_end = ${slot.windowEnd}`.pipe(
        Effect.tap((rows) => Effect.sync(() => (slot.synced = Math.max(slot.synced, Number(rows[0]?.count ?? 0))))),
        Effect.timeout(READ_WAIT_MS),
        Effect.catchAllCause((cause) => Effect.logWarning("rate limit count could not be read; deciding locally", cause)),
        Effect.ensuring(Effect.sync(() => (slot.learning = undefined))),
        Effect.ensuring(Deferred.done(learned, Exit.void)),
        Effect.forkIn(scope)
      )

    /**
     * Counts one event in the window, or fails with the time left in it. A node that first sees a
     * key after its window has run for a sync interval learns the cluster's count before deciding:
     * other nodes may have filled the window long before, and waiting for the next sync would let a
     * whole limit through again.
     */
    const count = (bucket: Bucket, key: string, window: Window): Effect.Effect<void, RateLimited> => {
      const now = Date.now()
      const windowStart = Math.floor(now / window.scale_ms) * window.scale_ms
      const windowEnd = windowStart + window.scale_ms
      const id = slotId(bucket, key, windowStart, windowEnd)
      let slot = slots.get(id)
      if (slot === undefined) {
        slot = { bucket, key, windowStart, windowEnd, unsynced: 0, synced: 0, learning: undefined }
        slots.set(id, slot)
        if (now - windowStart >= config.rateLimitSyncMs) {
          const learned = Deferred.unsafeMake<void>(FiberId.none)
          slot.learning = learned
          const joined = slot
          return learn(joined, learned).pipe(
            Effect.zipRight(Deferred.await(learned)),
            Effect.zipRight(Effect.suspend(() => decide(joined, window.limit)))
          )
        }
      }
      if (slot.learning !== undefined) {
        const joined = slot
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

    /**
     * Adds local counts to the shared table and learns the cluster's totals for live windows. Only
     * windows with new local counts are written; the others are only read (an upsert of nothing would
     * still leave a dead row version per window and interval).
     */
    const sync = Effect.gen(function*() {
      const now = Date.now()
      for (const [id, slot] of slots) if (slot.windowEnd <= now) slots.delete(id)
      const live = [...slots.values()]
      if (live.length === 0) return
      const deltas = live.map((slot) => slot.unsynced)
      const rows = yield* sql<{ bucket: string; key: string; window_start: string; window_end: string; count: string }>`
        WITH local AS (
          SELECT * FROM UNNEST(${live.map((s) => s.bucket)}::text[], ${live.map((s) => s.key)}::text[],
                               ${live.map((s) => s.windowStart)}::int8[], ${live.map((s) => s.windowEnd)}::int8[],
                               ${deltas}::int8[])
                   AS l(bucket, key, window_start, window_end, delta)
        ), added AS (
          INSERT INTO rate_limit_counters (bucket, key, window_start, window_end, count)
          SELECT bucket, key, window_start, window_end, delta FROM local WHERE delta > 0
          ON CONFLICT (bucket, key, window_start, window_end)
          DO UPDATE SET count = rate_limit_counters.count + EXCLUDED.count
          RETURNING bucket, key, window_start, window_end, count
        )
        SELECT bucket, key, window_start, window_end, count FROM added
        UNION ALL
        SELECT c.bucket, c.key, c.window_start, c.window_end, c.count
        FROM rate_limit_counters c JOIN local l USING (bucket, key, window_start, window_end)
        WHERE l.delta = 0`
      live.forEach((slot, i) => (slot.unsynced -= deltas[i]!))
      for (const row of rows) {
        const slot = slots.get(slotId(row.bucket, row.key, row.window_start, row.window_end))
        if (slot !== undefined) slot.synced = Number(row.count)
      }
    })

    yield* Effect.forkScoped(
      sync.pipe(
        Effect.catchAllCause((cause) => Effect.logWarning("rate limit sync failed", cause)),
        Effect.repeat(Schedule.spaced(Duration.millis(config.rateLimitSyncMs)))
      )
    )
    yield* jobs.every("prune_rate_limit_counters", "1 minute", pruneCounters)

    return { consume } as const
  })
}) {}
