import { SqlClient } from "@effect/sql"
import { Duration, Effect, Option, Schedule, Schema } from "effect"
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
}

const OVERRIDABLE: ReadonlySet<string> = new Set<OverridableBucket>([
  "activity_create",
  "upload",
  "inbound",
  "token_generate",
  "publishable_token"
])

/** Tenant overrides are read at most this often per tenant. */
const TENANT_LIMITS_TTL_MS = 1000

const decodeTenantLimits = Schema.decodeUnknownOption(TenantLimits)

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
    const refreshing = new Set<string>()
    const scope = yield* Effect.scope

    const loadOverrides = (tenantId: string) =>
      sql<{ limits: unknown }>`SELECT limits FROM tenants WHERE id = ${tenantId}`.pipe(
        Effect.map((rows): Overrides => Option.getOrElse(decodeTenantLimits(rows[0]?.limits ?? {}), () => ({}))),
        Effect.tap((limits) => Effect.sync(() => tenantLimits.set(tenantId, { at: Date.now(), limits }))),
        Effect.orElseSucceed((): Overrides => tenantLimits.get(tenantId)?.limits ?? {})
      )

    /**
     * The tenant's overrides, at most about a second old. A stale entry is answered at once and
     * refreshed by one background read, so a busy tenant costs one query a second, not one per request.
     */
    const overrideOf = (tenantId: string) =>
      Effect.suspend(() => {
        const cached = tenantLimits.get(tenantId)
        if (cached === undefined) return loadOverrides(tenantId)
        if (Date.now() - cached.at >= TENANT_LIMITS_TTL_MS && !refreshing.has(tenantId)) {
          refreshing.add(tenantId)
          return loadOverrides(tenantId).pipe(
            Effect.ensuring(Effect.sync(() => refreshing.delete(tenantId))),
            Effect.forkIn(scope),
            Effect.as(cached.limits)
          )
        }
        return Effect.succeed(cached.limits)
      })

    /** Tenant override, then `RATE_LIMITS`, then the built-in default. */
    const windowOf = (bucket: Bucket, tenantId: string | null): Effect.Effect<Window> => {
      const fallback = installation[bucket] ?? defaultWindows[bucket]
      return tenantId !== null && OVERRIDABLE.has(bucket)
        ? Effect.map(overrideOf(tenantId), (overrides) => overrides[bucket as OverridableBucket] ?? fallback)
        : Effect.succeed(fallback)
    }

    /** Counts one event in the window, or fails with the time left in it. */
    const count = (bucket: Bucket, key: string, window: Window) => {
      const now = Date.now()
      const windowStart = Math.floor(now / window.scale_ms) * window.scale_ms
      const id = `${bucket}\u0000${key}\u0000${windowStart}`
      let slot = slots.get(id)
      if (slot === undefined) {
        slot = { bucket, key, windowStart, windowEnd: windowStart + window.scale_ms, unsynced: 0, synced: 0 }
        slots.set(id, slot)
      }
      if (slot.synced + slot.unsynced >= window.limit) {
        rejections.inc({ bucket })
        return Effect.fail(
          new RateLimited({ message: `rate limit ${bucket} exceeded`, retry_after_ms: Math.max(1, slot.windowEnd - now) })
        )
      }
      slot.unsynced += 1
      return Effect.void
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
      const rows = yield* sql<{ bucket: string; key: string; window_start: string; count: string }>`
        WITH local AS (
          SELECT * FROM UNNEST(${live.map((s) => s.bucket)}::text[], ${live.map((s) => s.key)}::text[],
                               ${live.map((s) => s.windowStart)}::int8[], ${deltas}::int8[])
                   AS l(bucket, key, window_start, delta)
        ), added AS (
          INSERT INTO rate_limit_counters (bucket, key, window_start, count)
          SELECT bucket, key, window_start, delta FROM local WHERE delta > 0
          ON CONFLICT (bucket, key, window_start) DO UPDATE SET count = rate_limit_counters.count + EXCLUDED.count
          RETURNING bucket, key, window_start, count
        )
        SELECT bucket, key, window_start, count FROM added
        UNION ALL
        SELECT c.bucket, c.key, c.window_start, c.count
        FROM rate_limit_counters c JOIN local l USING (bucket, key, window_start)
        WHERE l.delta = 0`
      live.forEach((slot, i) => (slot.unsynced -= deltas[i]!))
      for (const row of rows) {
        const slot = slots.get(`${row.bucket}\u0000${row.key}\u0000${row.window_start}`)
        if (slot !== undefined) slot.synced = Number(row.count)
      }
    })

    yield* Effect.forkScoped(
      sync.pipe(
        Effect.catchAllCause((cause) => Effect.logWarning("rate limit sync failed", cause)),
        Effect.repeat(Schedule.spaced(Duration.millis(config.rateLimitSyncMs)))
      )
    )
    yield* jobs.every(
      "prune_rate_limit_counters",
      "1 minute",
      sql`DELETE FROM rate_limit_counters WHERE window_start < ${Date.now() - 2 * 3_600_000}`.pipe(Effect.asVoid)
    )

    return { consume } as const
  })
}) {}
