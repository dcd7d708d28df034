/**
 * How a delivery receipt moves a delivery (server-apis.md "Delivery receipts"): pure, so the SQL
 * that applies it (`DeliveryReceipts`) and its tests share one statement of the rules.
 */

/** Statuses a delivery can have. */
export type DeliveryStatus = "pending" | "sent" | "delivered" | "read" | "failed"

/** Statuses a receipt can report. */
export type ReceiptStatus = "sent" | "delivered" | "read" | "failed"

/** A receipt as the inbound status route reads it; `timestamp` is ISO 8601 UTC when given. */
export interface Receipt {
  readonly status: ReceiptStatus
  readonly timestamp: string | null
  readonly error: string | null
}

/** What a receipt changes on a delivery row; `null` columns are left as they are. */
export interface ReceiptChange {
  readonly status: DeliveryStatus
  readonly sent_at: string | null
  readonly delivered_at: string | null
  readonly read_at: string | null
  /** Set only by a `failed` receipt (null when it carried no error). */
  readonly last_error: { readonly value: string | null } | null
}

const ORDER: Record<Exclude<DeliveryStatus, "failed">, number> = { pending: 0, sent: 1, delivered: 2, read: 3 }

/**
 * The change a receipt makes to a delivery in `current`, or null when it is ignored (an ignored
 * receipt still counts as processed). `now` stands in for a receipt without a timestamp.
 *
 * Forward only along pending < sent < delivered < read. A `failed` receipt applies unless the
 * delivery was already read. `failed` is outside the order: a later success receipt on a failed
 * delivery is applied (decided here: the provider's report that the message arrived is the truer
 * state; the failure stays readable in `last_error`). Only the reported status's timestamp is set.
 */
export const receiptChange = (current: DeliveryStatus, receipt: Receipt, now: string): ReceiptChange | null => {
  const at = receipt.timestamp ?? now
  if (receipt.status === "failed") {
    return current === "read"
      ? null
      : { status: "failed", sent_at: null, delivered_at: null, read_at: null, last_error: { value: receipt.error } }
  }
  if (current !== "failed" && ORDER[receipt.status] <= ORDER[current]) return null
  return {
    status: receipt.status,
    sent_at: receipt.status === "sent" ? at : null,
    delivered_at: receipt.status === "delivered" ? at : null,
    read_at: receipt.status === "read" ? at : null,
    last_error: null
  }
}
