import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { actorLabel } from "../auth/Actor.js"
import type { TenantCredential } from "../auth/TenantCredential.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { NotFound } from "../domain/ApiError.js"
import type { ChannelId } from "../domain/Channel.js"
import { Delivery, type DeliveryId, type DeliveryStatus } from "../domain/Delivery.js"
import { NotFailed } from "../domain/DeliveryErrors.js"
import { ChannelDeliveries } from "./ChannelDeliveries.js"
import { lookupDeliveryChannel } from "./DeliveryChannelLookup.js"

/** Columns of the API's delivery, in `Delivery`'s order. */
const DELIVERY_COLUMNS = "id, activity_id, channel_id, status, attempts, last_error, provider_message_id, sent_at, " +
  "delivered_at, read_at, retry_count, retried_by, retried_at, payload, inserted_at, updated_at"

const decodeDeliveries = Schema.decodeUnknown(Schema.Array(Delivery))

/** Filters and keyset position of `GET /deliveries`; null is "any". */
export interface DeliveryFilter {
  readonly status: DeliveryStatus | null
  readonly channelId: string | null
  readonly activityId: string | null
  readonly conversationId: string | null
  /** (inserted_at, id) of the last row of the previous page. */
  readonly after: readonly [string, string] | null
  readonly limit: number
}

/** Dead letters one channel replay moves at most; a caller repeats while it gets this many. */
export const CHANNEL_RETRY_CAP = 10_000
/** Dead letters one statement of a channel replay moves: each is short, whatever the channel holds. */
export const CHANNEL_RETRY_CHUNK = 500

/** A tenant's deliveries: the list and the dead-letter replays of the tenant API. */
export class Deliveries extends Effect.Service<Deliveries>()("parley/Deliveries", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const loops = yield* ChannelDeliveries

    /** Newest first; one more row than `limit` is read to tell `hasMore`. */
    const list = (tenantId: string, f: DeliveryFilter) =>
      sql`
          SELECT ${sql.literal(DELIVERY_COLUMNS)} FROM deliveries
          WHERE tenant_id = ${tenantId}
            ${f.status === null ? sql`` : sql`AND status = ${f.status}`}
            ${f.channelId === null ? sql`` : sql`AND channel_id = ${f.channelId}`}
            ${f.activityId === null ? sql`` : sql`AND activity_id = ${f.activityId}`}
            ${f.conversationId === null ? sql`` : sql`AND conversation_id = ${f.conversationId}`}
            ${f.after === null ? sql`` : sql`AND (inserted_at, id) < (${f.after[0]}::timestamptz, ${f.after[1]}::uuid)`}
          ORDER BY inserted_at DESC, id DESC
          LIMIT ${f.limit + 1}`.pipe(
        Effect.flatMap(decodeDeliveries),
        Effect.map((rows) => ({ items: rows.slice(0, f.limit), hasMore: rows.length > f.limit })),
        orUnavailable
      )

    /**
     * Replays one dead letter: pending again and due now, with a fresh set of attempts under the
     * channel's retry policy; `last_error` stays until the next attempt replaces it. The channel's
     * loop is woken after the commit, so the replay does not wait for the sweep.
     */
    const retry = (credential: TenantCredential, id: DeliveryId) =>
      Effect.gen(function*() {
        const rows = yield* sql`
          UPDATE deliveries
          SET status = 'pending', attempts = 0, retry_count = retry_count + 1,
              retried_by = ${actorLabel(credential.actor)}, retried_at = now(), next_attempt_at = now(), updated_at = now()
          WHERE id = ${id} AND tenant_id = ${credential.tenantId} AND status = 'failed'
          RETURNING ${sql.literal(DELIVERY_COLUMNS)}`.pipe(Effect.flatMap(decodeDeliveries))
        if (rows[0] !== undefined) {
          yield* loops.wake(rows[0].channel_id)
          return rows[0]
        }
        const found = yield* sql`SELECT status FROM deliveries WHERE id = ${id} AND tenant_id = ${credential.tenantId}`
        return yield* found.length === 0
          ? Effect.fail(new NotFound({ message: `delivery ${id} not found` }))
          : Effect.fail(new NotFailed({ message: `delivery ${id} is not failed` }))
      }).pipe(orUnavailable)

    const retryChunk = (channelId: string, retriedBy: string, size: number) =>
      sql<{ n: number }>`
        WITH picked AS (
          SELECT id FROM deliveries
          WHERE channel_id = ${channelId} AND status = 'failed'
          ORDER BY inserted_at, id
          LIMIT ${size}
          FOR UPDATE SKIP LOCKED
        ), moved AS (
          UPDATE deliveries d
          SET status = 'pending', attempts = 0, retry_count = d.retry_count + 1,
              retried_by = ${retriedBy}, retried_at = now(), next_attempt_at = now(), updated_at = now()
          FROM picked WHERE d.id = picked.id AND d.status = 'failed'
          RETURNING 1
        )
        SELECT count(*)::int AS n FROM moved`.pipe(Effect.map((rows) => rows[0]?.n ?? 0))

    /**
     * Replays a channel's dead letters, oldest first, `CHANNEL_RETRY_CHUNK` per statement and at most
     * `CHANNEL_RETRY_CAP` per call. Each chunk commits on its own: a failure midway keeps what was done
     * (and leaves it to the sweep); after the last chunk the channel's loop is woken.
     */
    const retryChannel = (credential: TenantCredential, channelId: ChannelId) =>
      Effect.gen(function*() {
        yield* lookupDeliveryChannel(sql, credential, channelId)
        const retriedBy = actorLabel(credential.actor)
        let total = 0
        while (total < CHANNEL_RETRY_CAP) {
          const size = Math.min(CHANNEL_RETRY_CHUNK, CHANNEL_RETRY_CAP - total)
          const moved = yield* retryChunk(channelId, retriedBy, size)
          total += moved
          if (moved < size) break
        }
        if (total > 0) yield* loops.wake(channelId)
        return total
      }).pipe(orUnavailable)

    return { list, retry, retryChannel } as const
  })
}) {}
