import { SqlClient } from "@effect/sql"
import { Duration, Effect, Option, Random, Schema } from "effect"
import { ChannelSecrets } from "../channels/ChannelSecrets.js"
import { StoredRetryPolicy } from "../domain/Channel.js"
import { Window } from "../domain/RateLimit.js"
import { uuidBrander } from "../domain/Uuid.js"
import type { ChannelId } from "../domain/Channel.js"
import type { TenantId } from "../domain/Tenant.js"
import {
  type Breaker,
  type CircuitState,
  closedBreaker,
  onFailure,
  onNeutral,
  onSuccess,
  permit,
  reconcile
} from "./CircuitBreaker.js"
import { type DeliveryChannel, DeliverySenders, type DueDelivery, Outcome } from "./DeliverySender.js"
import { DeliveryMetrics } from "./DeliveryMetrics.js"
import type { DeliverySettings } from "./DeliverySettings.js"
import { nextAttemptDelayMs } from "./RetryDelay.js"

/** What a turn did: sent a batch (another turn follows), found nothing due, or parked the channel. */
export type TurnResult =
  | { readonly _tag: "worked" }
  | { readonly _tag: "idle" }
  /** `until` (epoch ms): when sending may resume by itself; null: only a change of the channel resumes it. */
  | { readonly _tag: "parked"; readonly until: number | null }

const WORKED: TurnResult = { _tag: "worked" }
const IDLE: TurnResult = { _tag: "idle" }
const parked = (until: number | null): TurnResult => ({ _tag: "parked", until })

/**
 * Beyond the send's own time bound, how long a claim outlives it: the recording of the outcome, a slow
 * database. A claim is `next_attempt_at` pushed past the sends (see `claim`): if this owner dies, the
 * delivery is due again once the lease ends and the next owner sends it again (at least once).
 */
const LEASE_MARGIN_MS = 30_000

const ChannelRow = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  type: Schema.String,
  mode: Schema.String,
  status: Schema.String,
  config: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  retry_policy: StoredRetryPolicy,
  rate_limit: Schema.NullOr(Window),
  circuit_state: Schema.Literal("closed", "open", "half_open", "paused"),
  circuit_failures: Schema.Int,
  secret_sealed: Schema.NullOr(Schema.Uint8ArrayFromSelf)
})

/** A breaker as `channels` stores it: what a conditional write of the next one expects to find. */
interface StoredBreaker {
  readonly state: CircuitState
  readonly failures: number
}

interface ClaimedRow {
  readonly id: string
  readonly tenant_id: string
  readonly activity_id: string
  readonly conversation_id: string
  readonly attempts: number
  readonly payload: Record<string, unknown>
  /** When the delivery was planned (epoch ms): the append's time, for the latency to its first success. */
  readonly planned_ms: string
}

/** An attempt's outcome as its row records it (`recordAll`); `delay_ms` is until the next attempt of a retry. */
interface RecordedOutcome {
  readonly id: string
  readonly status: "sent" | "failed" | "pending"
  readonly attempts: number
  readonly provider_message_id: string | null
  readonly last_error: string | null
  readonly delay_ms: number | null
}

const channelIdOf = uuidBrander<ChannelId>()
const tenantIdOf = uuidBrander<TenantId>()

/**
 * One channel's delivery loop, a turn at a time (the channel's entity runs the turns). Each turn reads
 * the channel again (the tenant API pauses and resumes it by writing `circuit_state`, and rotates its
 * secret; a new owner goes on from the stored `circuit_failures`), asks the breaker, claims the oldest
 * due deliveries within the channel's rate limit, sends them with bounded concurrency and records the
 * batch's outcomes together.
 */
export const makeDeliveryLoop = (channelId: string, settings: DeliverySettings) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const senders = yield* DeliverySenders
    const metrics = yield* DeliveryMetrics
    const secrets = yield* ChannelSecrets
    // The loop ends with its entity (moved, or idle): the channel's next owner reports its breaker.
    yield* Effect.addFinalizer(() => Effect.sync(() => metrics.forgetBreaker(channelId)))
    const decodeChannel = Schema.decodeUnknown(ChannelRow)
    let breaker: Breaker = closedBreaker
    // Start times of this owner's sends within the rate limit's window, oldest first.
    let recentSends: Array<number> = []

    /**
     * Writes a change of the breaker's state or count (only then: a steady channel writes nothing),
     * unless the stored one moved meanwhile (a pause or resume): the next turn reads that.
     */
    const persist = (before: StoredBreaker, after: Breaker) => {
      metrics.breaker(channelId, after.state)
      if (before.state === after.state && before.failures === after.failures) return Effect.void
      const write = sql`
        UPDATE channels SET circuit_state = ${after.state}, circuit_failures = ${after.failures}
        WHERE id = ${channelId} AND circuit_state = ${before.state} AND circuit_failures = ${before.failures}`
      return before.state === after.state ? write : write.pipe(
        Effect.zipRight(Effect.logInfo("delivery circuit breaker changed").pipe(
          Effect.annotateLogs({ channel_id: channelId, from: before.state, to: after.state })
        ))
      )
    }

    /**
     * Takes up to `limit` due deliveries, oldest first, skipping rows another transaction holds, and
     * pushes their `next_attempt_at` past the lease: the claim needs no transaction held while sending.
     */
    const claim = (limit: number, leaseMs: number) =>
      sql<ClaimedRow>`
        WITH due AS (
          SELECT id FROM deliveries
          WHERE channel_id = ${channelId} AND status = 'pending'
            AND (next_attempt_at IS NULL OR next_attempt_at <= now())
          ORDER BY next_attempt_at NULLS FIRST, inserted_at, id
          LIMIT ${limit}
          FOR UPDATE SKIP LOCKED
        )
        , claimed AS (
          UPDATE deliveries d
          SET next_attempt_at = now() + make_interval(secs => ${leaseMs / 1000}), updated_at = now()
          FROM due WHERE d.id = due.id
          RETURNING d.id, d.tenant_id, d.activity_id, d.conversation_id, d.attempts, d.payload, d.inserted_at
        )
        SELECT id, tenant_id, activity_id, conversation_id, attempts, payload,
               (extract(epoch FROM inserted_at) * 1000)::bigint::text AS planned_ms
        FROM claimed ORDER BY inserted_at, id`

    /** Gives a claimed delivery back unsent (the breaker opened or a pause came while it waited). */
    const release = (id: string) =>
      sql`UPDATE deliveries SET next_attempt_at = now(), updated_at = now() WHERE id = ${id} AND status = 'pending'`

    /** Counts the attempt in the metrics and gives what it leaves in its row, for `recordAll`. */
    const recorded = (
      delivery: DueDelivery,
      channel: DeliveryChannel,
      outcome: Outcome,
      plannedMs: number
    ): Effect.Effect<RecordedOutcome> => {
      const attempts = delivery.attempts + 1
      if (outcome._tag === "Sent") {
        metrics.attempted(channel.type, "sent")
        metrics.firstSuccess(channel.type, (Date.now() - plannedMs) / 1000)
        const providerId = Option.getOrNull(outcome.providerMessageId)
        return Effect.succeed({ id: delivery.id, status: "sent", attempts, provider_message_id: providerId, last_error: null, delay_ms: null })
      }
      const error = outcome.error.slice(0, 2000)
      if (outcome._tag === "Permanent" || attempts >= channel.retryPolicy.max_attempts) {
        metrics.attempted(channel.type, "failed")
        return Effect.succeed({ id: delivery.id, status: "failed", attempts, provider_message_id: null, last_error: error, delay_ms: null })
      }
      metrics.attempted(channel.type, "retry")
      return Effect.map(Random.next, (random) => ({
        id: delivery.id,
        status: "pending",
        attempts,
        provider_message_id: null,
        last_error: error,
        delay_ms: nextAttemptDelayMs(channel.retryPolicy, attempts, Option.getOrUndefined(outcome.afterMs), random)
      }))
    }

    /**
     * Writes a batch's outcomes in one statement once its sends are done. A row is `sent` only after
     * its receiver answered; if this owner dies before, the lease ends and the next one sends again.
     * `status = 'pending'` keeps a row that changed meanwhile (a retry by hand) as it is.
     */
    const recordAll = (outcomes: ReadonlyArray<RecordedOutcome>) =>
      sql`
        UPDATE deliveries d
        SET status = o.status, attempts = o.attempts,
          sent_at = CASE WHEN o.status = 'sent' THEN now() ELSE d.sent_at END,
          provider_message_id = COALESCE(o.provider_message_id, d.provider_message_id), last_error = o.last_error,
          next_attempt_at = now() + make_interval(secs => o.delay_ms / 1000), updated_at = now()
        FROM jsonb_to_recordset(${JSON.stringify(outcomes)}::jsonb)
          AS o(id uuid, status text, attempts int, provider_message_id text, last_error text, delay_ms float8)
        WHERE d.id = o.id AND d.status = 'pending'`

    /** One attempt, bounded by the policy's `timeout_ms`; a sender's defect is an attempt that failed. */
    const attempt = (delivery: DueDelivery, channel: DeliveryChannel) =>
      senders.forType(channel.type).send(delivery, channel).pipe(
        Effect.timeoutTo({
          duration: Duration.millis(channel.retryPolicy.timeout_ms),
          onTimeout: () => Outcome.Retry({ afterMs: Option.none(), error: `timed out after ${channel.retryPolicy.timeout_ms} ms` }),
          onSuccess: (outcome) => outcome
        }),
        Effect.catchAllDefect((defect) =>
          Effect.logError("delivery sender died", defect).pipe(
            Effect.as(Outcome.Retry({ afterMs: Option.none(), error: "sender failed unexpectedly" }))
          )
        )
      )

    /** Sends one claimed delivery and adds its outcome to `outcomes`; one the breaker stops is given back. */
    const sendOne = (row: ClaimedRow, channel: DeliveryChannel, outcomes: Array<RecordedOutcome>) =>
      Effect.suspend(() => {
        // The breaker may have opened while this one waited for its turn: it stays parked.
        if (breaker.state === "open" || breaker.state === "paused") {
          return release(row.id).pipe(
            // Not given back: its lease ends and it is sent then.
            Effect.catchAll((error) =>
              Effect.logWarning("delivery not released", error).pipe(Effect.annotateLogs("delivery_id", row.id))
            )
          )
        }
        const delivery: DueDelivery = {
          id: row.id,
          tenantId: row.tenant_id,
          activityId: row.activity_id,
          conversationId: row.conversation_id,
          attempts: row.attempts,
          payload: row.payload
        }
        recentSends.push(Date.now())
        return attempt(delivery, channel).pipe(
          Effect.flatMap((outcome) => {
            breaker = outcome._tag === "Sent"
              ? onSuccess(breaker)
              : outcome._tag === "Retry"
              ? onFailure(breaker, settings.breaker, Date.now())
              : onNeutral(breaker)
            return recorded(delivery, channel, outcome, Number(row.planned_ms))
          }),
          Effect.map((outcome) => {
            outcomes.push(outcome)
          })
        )
      })

    /** How many sends the channel's rate limit allows now, and when the next one frees up. */
    const rateRoom = (rateLimit: typeof Window.Type | null, now: number) => {
      if (rateLimit === null) {
        // Kept only while a limit applies: a channel without one would otherwise grow the list for ever.
        recentSends = []
        return { room: Infinity, freeAt: now }
      }
      recentSends = recentSends.filter((at) => at > now - rateLimit.scale_ms)
      return { room: rateLimit.limit - recentSends.length, freeAt: (recentSends[0] ?? now) + rateLimit.scale_ms }
    }

    const turn = Effect.gen(function*() {
      const rows = yield* sql`
        SELECT id, tenant_id, type, mode, status, config, retry_policy, rate_limit, circuit_state, circuit_failures, secret_sealed
        FROM channels WHERE id = ${channelId}`
      // A deleted channel took its deliveries with it.
      if (rows.length === 0) return IDLE
      const row = yield* decodeChannel(rows[0])
      const now = Date.now()
      const stored: StoredBreaker = { state: row.circuit_state, failures: row.circuit_failures }
      breaker = reconcile(breaker, stored.state, stored.failures, now)
      // An inactive or inbound-only channel receives nothing: its deliveries wait for a change.
      if (row.status !== "active" || row.mode === "inbound") return parked(null)
      const asked = permit(breaker, settings.breaker, now)
      if (asked._tag === "park") return parked(asked.until)
      const { freeAt, room } = rateRoom(row.rate_limit, now)
      if (room <= 0) return parked(freeAt)
      const limit = asked._tag === "probe" ? 1 : Math.min(settings.batchSize, room)
      const rounds = Math.ceil(limit / settings.concurrency)
      const claimed = yield* claim(limit, row.retry_policy.timeout_ms * rounds + LEASE_MARGIN_MS)
      // Nothing due: an open breaker stays open, its probe waits for a delivery to probe with.
      if (claimed.length === 0) return IDLE
      breaker = asked.breaker
      // Conditional on the breaker read at the start of the turn: a pause written since wins.
      yield* persist(stored, breaker)
      const channel: DeliveryChannel = {
        id: channelIdOf(row.id),
        tenantId: tenantIdOf(row.tenant_id),
        type: row.type,
        config: row.config,
        retryPolicy: row.retry_policy,
        // Opened once a turn, not per send: a rotation reaches the next turn's sends.
        signingSecret: secrets.open(row.id, row.secret_sealed)
      }
      const beforeSends: StoredBreaker = { state: breaker.state, failures: breaker.failures }
      const outcomes: Array<RecordedOutcome> = []
      // `concurrency` workers take the batch's rows in order: a fiber per worker rather than one per
      // delivery (Effect.forEach's), which the profile counted (ADR 0030, "Cost per delivery").
      let next = 0
      const worker = Effect.whileLoop({
        while: () => next < claimed.length,
        body: () => sendOne(claimed[next++]!, channel, outcomes),
        step: () => undefined
      })
      yield* Effect.all(Array.from({ length: Math.min(settings.concurrency, claimed.length) }, () => worker), {
        concurrency: "unbounded",
        discard: true
      })
      if (outcomes.length > 0) {
        yield* recordAll(outcomes).pipe(
          // Unrecorded outcomes are sent again once their lease ends (at least once); the breaker
          // below is still written.
          Effect.catchAll((error) =>
            Effect.logWarning("delivery outcomes not recorded", error).pipe(Effect.annotateLogs("deliveries", outcomes.length))
          )
        )
      }
      yield* persist(beforeSends, breaker)
      return WORKED
    })

    return { turn } as const
  })

export type DeliveryLoop = Effect.Effect.Success<ReturnType<typeof makeDeliveryLoop>>
