import { SqlClient } from "@effect/sql"
import { Deferred, Duration, Effect, Exit, FiberId, Layer, Option, Schema } from "effect"
import { Counter } from "prom-client"
import { answerWithin } from "../concurrency/WorkQueue.js"
import { AppConfig } from "../config/AppConfig.js"
import { makeBatcher } from "../db/Batcher.js"
import { COUNTERS_STATEMENT_MS, CountersClient } from "../db/CountersClient.js"
import { RateLimited } from "../domain/ApiError.js"
import { type Bucket, defaultWindows, ipBuckets, type OverridableBucket, TenantLimits } from "../domain/RateLimit.js"
import { JobRunner } from "../ops/JobRunner.js"
import { failureLog } from "../ops/FailureLog.js"
import { Metrics } from "../ops/Metrics.js"
import { clientNetwork } from "./ClientNetwork.js"
import { CounterWindows, type Slot, slotId } from "./CounterWindows.js"

interface Window {
  readonly limit: number
  readonly scale_ms: number
}

/** The other nodes' count of one window and this node's stored one, as a statement returns them. */
interface CountRow {
  readonly bucket: string
  readonly key: string
  readonly window_start: string
  readonly window_end: string
  readonly others: string
  readonly mine: string
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
const READ_WAIT_MS = COUNTERS_STATEMENT_MS
/**
 * A window decided on within this time is read at every sync; one left alone longer is read again
 * before its next decision instead (a key used now and then costs a read per use, not ten a second).
 */
const READ_WHILE_USED_MS = 5_000
/** Shared counters are kept this long past their window's end, for nodes whose clocks run behind. */
const PRUNE_GRACE_MS = 60_000
/**
 * Most windows one sync writes, and most it reads: a flood of keys (many client IPs, say) must not
 * grow the statement past its time bound. What is left waits for the next sync, half an interval on.
 */
const SYNC_WRITES_MAX = 5_000
const SYNC_READS_MAX = 5_000
/** Most windows one read of the other nodes' counts asks about; reads that decisions wait for are batched. */
const LEARN_BATCH_MAX = 2_000
/** Most windows of the buckets counted per client address that a node keeps (CounterWindows). */
const IP_WINDOWS_MAX = 50_000

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

/** The limiter, keeping at most `ipWindowsMax` windows of the buckets counted per client address. */
const makeRateLimiter = (ipWindowsMax: number) =>
  Effect.gen(function*() {
    const config = yield* AppConfig
    const sql = yield* CountersClient
    const jobs = yield* JobRunner
    const metrics = yield* Metrics
    const rejections = new Counter({
      name: "parley_rate_limit_rejections_total",
      help: "Requests refused by a rate limit, by bucket",
      labelNames: ["bucket"] as const,
      registers: [metrics.registry]
    })
    const installation: { readonly [B in Bucket]?: Window | undefined } = Option.getOrElse(config.rateLimits, () => ({}))
    const slots = new CounterWindows(ipWindowsMax)
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

    /** The tenant's overrides if they were read less than a TTL ago. */
    const freshOverrides = (tenantId: string): Overrides | undefined => {
      const cached = tenantLimits.get(tenantId)
      return cached !== undefined && Date.now() - cached.at < TENANT_LIMITS_TTL_MS ? cached.limits : undefined
    }

    /**
     * The tenant's overrides read again, their entry being stale or missing: by one read that every
     * request arriving meanwhile waits for. A busy tenant costs one query a TTL.
     */
    const readOverrides = (tenantId: string): Effect.Effect<Overrides> =>
      Effect.suspend(() => {
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

    /** Tenant override (of an overridable bucket), then `RATE_LIMITS`, then the built-in default. */
    const windowIn = (bucket: Bucket, overrides: Overrides | undefined): Window =>
      overrides?.[bucket as OverridableBucket] ?? installation[bucket] ?? defaultWindows[bucket]

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

    /**
     * The other nodes' counts of these windows, and this node's stored ones: a window forgotten at
     * the bound of CounterWindows gets its count back (windows nobody counted in are left out).
     */
    const countsIn = (windows: ReadonlyArray<Slot>) => {
      const r = windowColumns(windows)
      return sql<CountRow>`
        SELECT c.bucket, c.key, c.window_start, c.window_end,
               coalesce(sum(c.count) FILTER (WHERE c.node <> ${node}), 0) AS others,
               coalesce(max(c.count) FILTER (WHERE c.node = ${node}), 0) AS mine
        FROM UNNEST(${r.buckets}::text[], ${r.keys}::text[], ${r.starts}::int8[], ${r.ends}::int8[])
             AS l(bucket, key, window_start, window_end)
        JOIN rate_limit_counters c USING (bucket, key, window_start, window_end)
        GROUP BY c.bucket, c.key, c.window_start, c.window_end`
    }
    const byWindow = (rows: ReadonlyArray<CountRow>) =>
      new Map(rows.map((row) => [slotId(row.bucket, row.key, row.window_start, row.window_end), row]))
    const idOf = (slot: Slot) => slotId(slot.bucket, slot.key, slot.windowStart, slot.windowEnd)
    /** Takes in what a read found for the slot's window; counts only grow. */
    const apply = (slot: Slot, row: CountRow | undefined) => {
      if (row === undefined) return
      const mine = Number(row.mine)
      slot.others = Math.max(slot.others, Number(row.others))
      slot.local = Math.max(slot.local, mine)
      slot.written = Math.max(slot.written, mine)
    }

    // Many keys first seen at once (a flood of client IPs) cost a statement per batch, not a read each.
    const readCounts = yield* makeBatcher<Slot, CountRow | undefined, unknown>({
      maxBatch: LEARN_BATCH_MAX,
      concurrency: 1,
      run: (windows) =>
        Effect.map(countsIn(windows), (rows) => {
          const counts = byWindow(rows)
          return windows.map((slot) => counts.get(idOf(slot)))
        }),
      timeout: { ms: READ_WAIT_MS, onTimeout: () => "slow" as const }
    })
    const learnLog = failureLog("rate limit count could not be read; deciding locally", "rate limit counts can be read again")

    /** What the other nodes have counted in the slot's window so far. */
    const learn = (slot: Slot, learned: Deferred.Deferred<void>) =>
      Effect.suspend(() => {
        const startedAt = Date.now()
        return readCounts(slot).pipe(
          Effect.matchCauseEffect({
            onSuccess: (row) => {
              apply(slot, row)
              return learnLog.succeeded
            },
            onFailure: learnLog.failed
          }),
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
     * Starts the slot's read of the other nodes' count unless one is under way. Marking and starting
     * are one step: an interruption between them would leave the key waiting for a read that never comes.
     */
    const learning = (slot: Slot) =>
      Effect.uninterruptible(Effect.suspend(() => {
        if (slot.learning !== undefined) return Effect.succeed(slot.learning)
        const learned = Deferred.unsafeMake<void>(FiberId.none)
        slot.learning = learned
        return Effect.as(learn(slot, learned), learned)
      }))

    /**
     * Counts one event in the window, or fails with the time left in it. A slot the last sync did not
     * read learns the others' count first, or a whole limit could pass again before the next sync (ADR 0005).
     */
    const count = (bucket: Bucket, key: string, window: Window, mayLearn = true): Effect.Effect<void, RateLimited> => {
      const now = Date.now()
      const windowStart = Math.floor(now / window.scale_ms) * window.scale_ms
      const windowEnd = windowStart + window.scale_ms
      const slot = slots.take(bucket, key, windowStart, windowEnd, now)
      if (mayLearn && (slot.learning !== undefined || (slot.readAt < lastSyncAt && now - windowStart >= config.rateLimitSyncMs))) {
        return learning(slot).pipe(
          Effect.flatMap(Deferred.await),
          // The read may outlast the window (up to a second): the event then belongs to the window
          // it is decided in, not to the ended one (a 429 for it, or a count the new one never sees).
          // Decided there on what this node knows: with the database silent, every read outlasts a
          // short window, and waiting again would hold the request for as long as the silence lasts.
          Effect.zipRight(Effect.suspend(() =>
            Date.now() < slot.windowEnd ? decide(slot, window.limit) : count(bucket, key, window, false)
          ))
        )
      }
      return decide(slot, window.limit)
    }

    /**
     * Counts one event for `key` in `bucket`, or fails with 429 `rate_limited` and the time left; runs on
     * every request, so plain functions rather than generators.
     */
    const consume = (bucket: Bucket, key: string, tenantId: string | null) =>
      Effect.suspend(() => {
        if (tenantId === null || !OVERRIDABLE.has(bucket)) {
          return count(bucket, ipBuckets.has(bucket) ? clientNetwork(key) : key, windowIn(bucket, undefined))
        }
        // Most decisions find the tenant's overrides fresh: decided at once, no read to wait on.
        const fresh = freshOverrides(tenantId)
        return fresh !== undefined
          ? count(bucket, key, windowIn(bucket, fresh))
          : Effect.flatMap(readOverrides(tenantId), (overrides) => count(bucket, key, windowIn(bucket, overrides)))
      })

    /** Up to `max` slots that `wanted` accepts, those `first` also accepts ahead of the rest; one pass. */
    const pick = (max: number, wanted: (slot: Slot) => boolean, first: (slot: Slot) => boolean) => {
      const ahead: Array<Slot> = []
      const rest: Array<Slot> = []
      for (const slot of slots) {
        if (!wanted(slot)) continue
        const into = first(slot) ? ahead : rest
        if (into.length < max) into.push(slot)
      }
      return ahead.concat(rest.slice(0, max - ahead.length))
    }

    /**
     * Writes this node's counts of the windows it accepted more in and reads the others' for the windows
     * it used; counts are absolute, so a sync whose answer was lost is safe to repeat (ADR 0005).
     */
    const sync = Effect.suspend(() => {
      const startedAt = Date.now()
      slots.dropEnded(startedAt)
      const writes = pick(SYNC_WRITES_MAX, (slot) => slot.local > slot.written, (slot) => slot.local - slot.written > 1)
      const reads = pick(
        SYNC_READS_MAX,
        (slot) => startedAt - slot.usedAt <= READ_WHILE_USED_MS,
        (slot) => slot.usedAt >= lastSyncAt
      )
      // Nothing to exchange: no statement, and nothing learned about the database (`false`).
      if (writes.length === 0 && reads.length === 0) {
        return Effect.sync(() => {
          lastSyncAt = startedAt
          return false
        })
      }
      const counts = writes.map((slot) => slot.local)
      const w = windowColumns(writes)
      return sql<CountRow>`
        WITH written AS (
          INSERT INTO rate_limit_counters (bucket, key, window_start, window_end, node, count)
          SELECT bucket, key, window_start, window_end, ${node}, count
          FROM UNNEST(${w.buckets}::text[], ${w.keys}::text[], ${w.starts}::int8[], ${w.ends}::int8[], ${counts}::int8[])
               AS l(bucket, key, window_start, window_end, count)
          ON CONFLICT (bucket, key, window_start, window_end, node)
          DO UPDATE SET count = EXCLUDED.count WHERE rate_limit_counters.count < EXCLUDED.count
        )
        ${countsIn(reads)}`.pipe(
        // Not waiting for the statement's cancellation: a silent connection must not stop the syncs.
        (statement) => answerWithin(statement, READ_WAIT_MS, () => new Error("the rate limit sync timed out")),
        // After a failed sync every count is written again: the database may have restarted and
        // lost the unlogged table. Writing an unchanged count leaves no row version behind.
        Effect.tapError(() =>
          Effect.sync(() => {
            for (const slot of slots) slot.written = 0
          })
        ),
        Effect.map((rows) => {
          writes.forEach((slot, i) => (slot.written = Math.max(slot.written, counts[i]!)))
          const found = byWindow(rows)
          for (const slot of reads) {
            apply(slot, found.get(idOf(slot)))
            slot.readAt = startedAt
          }
          // A failed sync leaves it: while the database is away, decisions are local.
          lastSyncAt = startedAt
          return true
        })
      )
    })

    const syncLog = failureLog("rate limit sync failed; counting locally until it succeeds", "rate limit sync recovered")
    // Twice per interval: another node's count reaches this one through its write and then this
    // node's read, each up to a period late, so what a node knows of the others is at most one
    // interval old (and a sync's duration), as the documented overshoot bound says.
    yield* jobs.every(
      "sync_rate_limit_counters",
      Duration.millis(config.rateLimitSyncMs / 2),
      sync.pipe(
        Effect.matchCauseEffect({
          onFailure: syncLog.failed,
          // A sync with nothing to exchange learned nothing about the database.
          onSuccess: (reachedDatabase) => (reachedDatabase ? syncLog.succeeded : Effect.void)
        })
      ),
      { fixedRate: true }
    )
    yield* jobs.every("prune_rate_limit_counters", "1 minute", pruneCounters)
    // Tenants not seen for a minute are forgotten: the map would otherwise hold every tenant ever served.
    yield* jobs.every("forget_idle_tenant_limits", "1 minute", Effect.sync(() => {
      const cutoff = Date.now() - 60_000
      for (const [tenantId, { at }] of tenantLimits) if (at < cutoff) tenantLimits.delete(tenantId)
    }))

    return { consume } as const
  })

/**
 * Fixed-window rate limits (client-api.md "Limits"), shared between nodes through a table: a burst
 * overshoots by at most what the other nodes accept within one sync interval (ADR 0005).
 */
export class RateLimiter extends Effect.Service<RateLimiter>()("parley/RateLimiter", {
  scoped: makeRateLimiter(IP_WINDOWS_MAX)
}) {
  /** A limiter keeping at most `max` windows of the buckets counted per client address. */
  static readonly keepingIpWindows = (max: number) =>
    Layer.scoped(RateLimiter, Effect.map(makeRateLimiter(max), RateLimiter.make))
}
