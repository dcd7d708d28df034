import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { orUnavailable } from "../db/SqlFailure.js"
import { inTransaction } from "../db/Transaction.js"
import { type DeliveryStatus, type Receipt, receiptChange } from "./ReceiptRules.js"

/** Which delivery of the channel a receipt is about: ours (`x-chat-delivery-id`) or the provider's id. */
export type ReceiptTarget =
  | { readonly deliveryId: string }
  | { readonly providerMessageId: string }

/**
 * What became of a receipt: `applied` and `ignored` count as processed (`receipts_processed`),
 * `unknown` (no such delivery on this channel) does not.
 */
export type ReceiptOutcome = "applied" | "ignored" | "unknown"

/** Applies delivery receipts (server-apis.md "Delivery receipts") for the inbound status route. */
export class DeliveryReceipts extends Effect.Service<DeliveryReceipts>()("parley/DeliveryReceipts", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /**
     * Applies `receipt` to the channel's delivery atomically: the row is locked, `receiptChange`
     * decides, the change is written, in one transaction, so concurrent receipts apply one after
     * the other and never move a delivery backwards. A malformed `timestamp` is 400.
     */
    const apply = (channelId: string, target: ReceiptTarget, receipt: Receipt) =>
      Effect.gen(function*() {
        const rows = yield* sql<{ id: string; status: DeliveryStatus; now: string }>`
          SELECT id, status, now() AS now FROM deliveries
          WHERE channel_id = ${channelId}
            AND ${"deliveryId" in target ? sql`id = ${target.deliveryId}` : sql`provider_message_id = ${target.providerMessageId}`}
          FOR UPDATE`
        const row = rows[0]
        if (row === undefined) return "unknown" as ReceiptOutcome
        const change = receiptChange(row.status, receipt, row.now)
        if (change === null) return "ignored" as ReceiptOutcome
        yield* sql`
          UPDATE deliveries SET
            status = ${change.status},
            sent_at = coalesce(${change.sent_at}::timestamptz, sent_at),
            delivered_at = coalesce(${change.delivered_at}::timestamptz, delivered_at),
            read_at = coalesce(${change.read_at}::timestamptz, read_at),
            last_error = ${change.last_error === null ? sql`last_error` : sql`${change.last_error.value}`},
            next_attempt_at = ${change.status === "failed" ? sql`NULL` : sql`next_attempt_at`},
            updated_at = now()
          WHERE id = ${row.id}`
        return "applied" as ReceiptOutcome
      }).pipe(inTransaction(sql), orUnavailable)

    return { apply } as const
  })
}) {}
