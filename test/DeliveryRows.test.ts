import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { redactedActivity } from "../src/delivery/DeliveryPayload.js"
import { deliveryRow } from "../src/delivery/DeliveryRows.js"
import type { Activity } from "../src/domain/Activity.js"
import { REDACTED, redactSensitive } from "../src/domain/Redaction.js"

const activity = (fields: Partial<Activity> = {}): Activity => ({
  id: crypto.randomUUID(),
  type: "message",
  sender: "user",
  text: "hi",
  attachments: [{ url: "https://example.test/a", access_token: "t" }],
  metadata: { api_key: "k", note: "kept", nested: { Authorization: "Bearer x" } },
  idempotency_key: "order-1",
  seq: 3,
  reply_to_id: null,
  message_type: null,
  payload: { password: "p", items: [{ secret: "s", n: 1 }] },
  source_channel_id: null,
  edited_at: null,
  deleted_at: null,
  conversation_id: crypto.randomUUID(),
  tenant_id: crypto.randomUUID(),
  inserted_at: "2025-01-02T03:04:05.000000Z",
  ...fields
})

describe("delivery rows", () => {
  it.effect("a delivery payload is the activity redacted as redactSensitive would, the activity left as it was", () =>
    Effect.sync(() => {
      for (const stored of [activity(), activity({ idempotency_key: null, payload: null })]) {
        const before = structuredClone(stored)
        expect(redactedActivity(stored)).toEqual(redactSensitive(stored))
        expect(stored).toEqual(before)
      }
      const payload = redactedActivity(activity())
      expect(payload.metadata).toEqual({ api_key: REDACTED, note: "kept", nested: { Authorization: REDACTED } })
      // The idempotency key is named like a credential: hidden when set, null stays null.
      expect(payload.idempotency_key).toBe(REDACTED)
      expect(redactedActivity(activity({ idempotency_key: null })).idempotency_key).toBeNull()
    }))

  it.effect("a planned delivery's row belongs to its activity's tenant and conversation and carries it redacted", () =>
    Effect.sync(() => {
      const stored = activity()
      const planned = { id: crypto.randomUUID(), activityId: stored.id, channelId: crypto.randomUUID() }
      expect(deliveryRow(planned, stored)).toEqual({
        id: planned.id,
        tenant_id: stored.tenant_id,
        activity_id: stored.id,
        conversation_id: stored.conversation_id,
        channel_id: planned.channelId,
        payload: redactSensitive(stored)
      })
    }))
})
