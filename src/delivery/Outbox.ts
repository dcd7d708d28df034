import { SqlClient } from "@effect/sql"
import { Data, Effect, Option, Schema } from "effect"
import type { TenantCredential } from "../auth/TenantCredential.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { inTransaction } from "../db/Transaction.js"
import { InvalidWatermark } from "../domain/ApiError.js"
import type { ChannelId } from "../domain/Channel.js"
import type { OutboxEntry } from "../domain/Delivery.js"
import { UnsupportedChannelType } from "../domain/DeliveryErrors.js"
import { lookupDeliveryChannel } from "./DeliveryChannelLookup.js"

/** Entries one acknowledgement statement moves to `delivered`: each is short, whatever the watermark. */
export const ACK_CHUNK = 1000

/** `appendToOutbox` of a delivery that is not there to append (gone, or not pending). */
export class NotAppendable extends Data.TaggedError("NotAppendable")<{
  readonly deliveryId: string
  readonly reason: "not_found" | "not_pending" | "not_http_pull"
}> {}

const EntryRow = Schema.Struct({
  seq: Schema.NumberFromString,
  activity: Schema.Record({ key: Schema.String, value: Schema.Unknown })
})
const decodeEntries = Schema.decodeUnknown(Schema.Array(EntryRow))
const Marks = Schema.Struct({ head: Schema.NumberFromString, acked: Schema.NumberFromString })
const decodeMarks = Schema.decodeUnknown(Schema.Array(Marks))

/**
 * The outbox of `http_pull` channels (CONTRACT.md §4, §7). An entry is a delivery to such a
 * channel with an `outbox_seq`: per channel, gap-free from 1, handed out under the channel row's
 * lock so that entries become visible in seq order. `sent` means in the outbox; an acknowledged
 * entry is `delivered`. The channel's `outbox_acked` is the acknowledged watermark.
 */
export class Outbox extends Effect.Service<Outbox>()("parley/Outbox", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Locks the channel's outbox marks (not its key: delivery inserts go on) and reads them. */
    const lockMarks = (channelId: string) =>
      sql`SELECT outbox_head::text AS head, outbox_acked::text AS acked FROM channels WHERE id = ${channelId} FOR NO KEY UPDATE`
        .pipe(Effect.flatMap(decodeMarks), Effect.map((rows) => Option.fromNullable(rows[0])))

    /**
     * Puts a pending delivery of an `http_pull` channel into its outbox (the delivery loop calls it
     * instead of sending): it gets the next seq and becomes `sent`. Idempotent: a delivery already
     * in the outbox answers its seq. Commits on its own, or joins the caller's transaction.
     */
    const appendToOutbox = (deliveryId: string) =>
      Effect.gen(function*() {
        const owner = yield* sql<{ channel_id: string; type: string }>`
          SELECT d.channel_id, c.type FROM deliveries d JOIN channels c ON c.id = d.channel_id WHERE d.id = ${deliveryId}`
        const channel = owner[0]
        if (channel === undefined) return yield* new NotAppendable({ deliveryId, reason: "not_found" })
        if (channel.type !== "http_pull") return yield* new NotAppendable({ deliveryId, reason: "not_http_pull" })
        // Channel row first, then the delivery: the order every outbox writer takes.
        const marks = yield* lockMarks(channel.channel_id)
        if (Option.isNone(marks)) return yield* new NotAppendable({ deliveryId, reason: "not_found" })
        const rows = yield* sql<{ status: string; outbox_seq: string | null }>`
          SELECT status, outbox_seq::text AS outbox_seq FROM deliveries WHERE id = ${deliveryId} FOR UPDATE`
        const row = rows[0]
        if (row === undefined) return yield* new NotAppendable({ deliveryId, reason: "not_found" })
        if (row.outbox_seq !== null) return { seq: Number(row.outbox_seq) }
        if (row.status !== "pending") return yield* new NotAppendable({ deliveryId, reason: "not_pending" })
        const seq = marks.value.head + 1
        yield* sql`UPDATE channels SET outbox_head = ${seq} WHERE id = ${channel.channel_id}`
        yield* sql`
          UPDATE deliveries
          SET outbox_seq = ${seq}, status = 'sent', sent_at = now(), attempts = attempts + 1,
              next_attempt_at = NULL, last_error = NULL, updated_at = now()
          WHERE id = ${deliveryId}`
        return { seq }
      }).pipe(inTransaction(sql), orUnavailable)

    const outboxChannel = (credential: TenantCredential, id: ChannelId) =>
      Effect.flatMap(lookupDeliveryChannel(sql, credential, id), (channel) =>
        channel.type === "http_pull"
          ? Effect.succeed(channel)
          : Effect.fail(new UnsupportedChannelType({ message: `channel ${id} is not an http_pull channel` })))

    /** One chunk of an acknowledgement, in its own transaction; the number of entries it delivered and whether it is done. */
    const ackChunk = (channelId: string, watermark: number) =>
      Effect.gen(function*() {
        const marks = yield* lockMarks(channelId)
        if (Option.isNone(marks)) return { acknowledged: 0, done: true }
        const { acked, head } = marks.value
        if (watermark > head) {
          return yield* new InvalidWatermark({ message: `watermark ${watermark} is beyond the outbox head ${head}` })
        }
        if (watermark <= acked) return { acknowledged: 0, done: true }
        const upTo = Math.min(watermark, acked + ACK_CHUNK)
        const moved = yield* sql<{ n: number }>`
          WITH moved AS (
            UPDATE deliveries SET status = 'delivered', delivered_at = now(), updated_at = now()
            WHERE channel_id = ${channelId} AND outbox_seq > ${acked} AND outbox_seq <= ${upTo} AND status = 'sent'
            RETURNING 1
          )
          SELECT count(*)::int AS n FROM moved`
        yield* sql`UPDATE channels SET outbox_acked = ${upTo} WHERE id = ${channelId}`
        return { acknowledged: moved[0]?.n ?? 0, done: upTo === watermark }
      }).pipe(inTransaction(sql))

    /** Acknowledges every entry up to `watermark` (400 `invalid_watermark` beyond the head); how many became delivered. */
    const acknowledge = (channelId: string, watermark: number) =>
      Effect.gen(function*() {
        let total = 0
        for (;;) {
          const chunk = yield* ackChunk(channelId, watermark)
          total += chunk.acknowledged
          if (chunk.done) return total
        }
      })

    /** `POST /channels/:id/outbox/ack`. */
    const ack = (credential: TenantCredential, id: ChannelId, watermark: number) =>
      outboxChannel(credential, id).pipe(Effect.zipRight(acknowledge(id, watermark)), orUnavailable)

    /**
     * `GET /channels/:id/outbox`: a sent watermark first acknowledges everything up to it; then the
     * entries after the acknowledged watermark, oldest first. `watermark` of the answer is the last
     * seq of the page (the acknowledged one when the page is empty): send it back to go on.
     */
    const poll = (credential: TenantCredential, id: ChannelId, watermark: Option.Option<number>, limit: number) =>
      Effect.gen(function*() {
        yield* outboxChannel(credential, id)
        if (Option.isSome(watermark)) yield* acknowledge(id, watermark.value)
        const marks = yield* sql`SELECT outbox_head::text AS head, outbox_acked::text AS acked FROM channels WHERE id = ${id}`
          .pipe(Effect.flatMap(decodeMarks))
        const from = Math.max(marks[0]?.acked ?? 0, Option.getOrElse(watermark, () => 0))
        const rows = yield* sql`
          SELECT outbox_seq::text AS seq, payload AS activity FROM deliveries
          WHERE channel_id = ${id} AND outbox_seq > ${from}
          ORDER BY outbox_seq
          LIMIT ${limit + 1}`.pipe(Effect.flatMap(decodeEntries))
        const entries: ReadonlyArray<OutboxEntry> = rows.slice(0, limit)
        const last = entries[entries.length - 1]
        return { entries, watermark: last === undefined ? from : last.seq, hasMore: rows.length > limit }
      }).pipe(orUnavailable)

    return { appendToOutbox, poll, ack } as const
  })
}) {}
