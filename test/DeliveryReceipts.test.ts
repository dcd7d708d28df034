import { describe, expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import { DeliveryReceipts } from "../src/delivery/DeliveryReceipts.js"
import { type DeliveryStatus, type Receipt, receiptChange } from "../src/delivery/ReceiptRules.js"
import { insertDelivery, storedDelivery } from "./support/DeliveryFixtures.js"
import { insertChannel, insertConversation } from "./support/Fixtures.js"
import { serverUrl } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

const NOW = "2026-02-01T00:00:00.000000Z"
const T = "2026-01-31T12:00:00.000000Z"
const receipt = (status: Receipt["status"], fields: Partial<Receipt> = {}): Receipt => ({
  status,
  timestamp: T,
  error: null,
  ...fields
})

describe("receipt rules", () => {
  const statuses: ReadonlyArray<DeliveryStatus> = ["pending", "sent", "delivered", "read"]

  it("moves forward only along pending < sent < delivered < read", () => {
    for (const [i, current] of statuses.entries()) {
      for (const [j, reported] of statuses.entries()) {
        if (reported === "pending") continue
        const change = receiptChange(current, receipt(reported as Receipt["status"]), NOW)
        expect(change === null, `${current} <- ${reported}`).toBe(j <= i)
        if (change !== null) expect(change.status).toBe(reported)
      }
    }
  })

  it("sets only the reported status's timestamp, from the receipt or else now", () => {
    expect(receiptChange("pending", receipt("sent"), NOW)).toEqual({
      status: "sent",
      sent_at: T,
      delivered_at: null,
      read_at: null,
      last_error: null
    })
    expect(receiptChange("sent", receipt("delivered", { timestamp: null }), NOW)).toEqual({
      status: "delivered",
      sent_at: null,
      delivered_at: NOW,
      read_at: null,
      last_error: null
    })
    expect(receiptChange("pending", receipt("read"), NOW)).toMatchObject({ status: "read", read_at: T, sent_at: null })
  })

  it("failed applies unless the delivery was read, and stores the error", () => {
    for (const current of ["pending", "sent", "delivered", "failed"] as const) {
      expect(receiptChange(current, receipt("failed", { error: "undeliverable" }), NOW)).toEqual({
        status: "failed",
        sent_at: null,
        delivered_at: null,
        read_at: null,
        last_error: { value: "undeliverable" }
      })
    }
    expect(receiptChange("sent", receipt("failed"), NOW)?.last_error).toEqual({ value: null })
    expect(receiptChange("read", receipt("failed", { error: "late" }), NOW)).toBeNull()
  })

  it("a success receipt on a failed delivery is applied (decided: the provider's report wins)", () => {
    expect(receiptChange("failed", receipt("sent"), NOW)?.status).toBe("sent")
    expect(receiptChange("failed", receipt("read"), NOW)?.status).toBe("read")
  })
})

layer(TestNodeLive(), { excludeTestServices: true })("applying receipts", (it) => {
  const sqlIt = it.effect.runIf(serverUrl !== undefined)
  const setup = Effect.gen(function*() {
    const tenant = yield* createTenant()
    const channel = yield* insertChannel(tenant.id)
    const conversationId = yield* insertConversation(tenant.id, channel.id)
    return { tenantId: tenant.id, channelId: channel.id, conversationId }
  })
  const withReceipts = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.provide(effect, DeliveryReceipts.Default)

  sqlIt("by delivery id and by provider message id: forward, timestamps, error; earlier ignored; unknown not counted", () =>
    withReceipts(Effect.gen(function*() {
      const ids = yield* setup
      const receipts = yield* DeliveryReceipts
      const id = yield* insertDelivery(ids, { status: "pending", providerMessageId: "wamid.1" })
      expect(yield* receipts.apply(ids.channelId, { deliveryId: id }, receipt("sent", { timestamp: "2026-01-01T00:00:01.000000Z" }))).toBe("applied")
      expect(yield* receipts.apply(ids.channelId, { providerMessageId: "wamid.1" }, receipt("delivered", { timestamp: "2026-01-01T00:00:02.000000Z" })))
        .toBe("applied")
      expect(yield* receipts.apply(ids.channelId, { deliveryId: id }, receipt("sent"))).toBe("ignored")
      const row = yield* storedDelivery(id)
      expect(row.status).toBe("delivered")
      expect(row.sent_at).toBe("2026-01-01T00:00:01.000000Z")
      expect(row.delivered_at).toBe("2026-01-01T00:00:02.000000Z")
      expect(row.read_at).toBeNull()
      expect(yield* receipts.apply(ids.channelId, { deliveryId: id }, receipt("failed", { error: "bounced" }))).toBe("applied")
      expect(yield* storedDelivery(id)).toMatchObject({ status: "failed", last_error: "bounced", delivered_at: "2026-01-01T00:00:02.000000Z" })
      expect(yield* receipts.apply(ids.channelId, { deliveryId: id }, receipt("read", { timestamp: null }))).toBe("applied")
      const read = yield* storedDelivery(id)
      expect(read.status).toBe("read")
      expect(read.read_at).not.toBeNull()
      expect(read.last_error).toBe("bounced")
      expect(yield* receipts.apply(ids.channelId, { deliveryId: id }, receipt("failed", { error: "late" }))).toBe("ignored")
      expect((yield* storedDelivery(id)).status).toBe("read")
      expect(yield* receipts.apply(ids.channelId, { deliveryId: crypto.randomUUID() }, receipt("sent"))).toBe("unknown")
      expect(yield* receipts.apply(ids.channelId, { providerMessageId: "nope" }, receipt("sent"))).toBe("unknown")
    })))

  sqlIt("a receipt names a delivery of its own channel only", () =>
    withReceipts(Effect.gen(function*() {
      const ids = yield* setup
      const other = yield* setup
      const receipts = yield* DeliveryReceipts
      const id = yield* insertDelivery(other, { status: "pending", providerMessageId: "shared" })
      expect(yield* receipts.apply(ids.channelId, { deliveryId: id }, receipt("read"))).toBe("unknown")
      expect(yield* receipts.apply(ids.channelId, { providerMessageId: "shared" }, receipt("read"))).toBe("unknown")
      expect((yield* storedDelivery(id)).status).toBe("pending")
    })))

  sqlIt("concurrent receipts never move a delivery backwards", () =>
    withReceipts(Effect.gen(function*() {
      const ids = yield* setup
      const receipts = yield* DeliveryReceipts
      const id = yield* insertDelivery(ids, { status: "pending" })
      const order: ReadonlyArray<Receipt["status"]> = ["read", "sent", "delivered", "sent", "delivered", "read", "sent"]
      const outcomes = yield* Effect.all(order.map((status) => receipts.apply(ids.channelId, { deliveryId: id }, receipt(status))), {
        concurrency: "unbounded"
      })
      expect(outcomes.every((o) => o !== "unknown")).toBe(true)
      expect((yield* storedDelivery(id)).status).toBe("read")
    })))

  sqlIt("a malformed timestamp is 400 and changes nothing", () =>
    withReceipts(Effect.gen(function*() {
      const ids = yield* setup
      const receipts = yield* DeliveryReceipts
      const id = yield* insertDelivery(ids, { status: "pending" })
      const error = yield* Effect.flip(receipts.apply(ids.channelId, { deliveryId: id }, receipt("sent", { timestamp: "yesterday-ish" })))
      expect(error._tag).toBe("BadRequest")
      expect((yield* storedDelivery(id)).status).toBe("pending")
    })))
})
