import { Context, Data, type Effect, type Option, type Redacted } from "effect"
import type { ChannelId, RetryPolicy } from "../domain/Channel.js"
import type { TenantId } from "../domain/Tenant.js"

/** A claimed delivery as a sender gets it: `payload` is the stored activity, redacted (DeliveryRows). */
export interface DueDelivery {
  readonly id: string
  readonly tenantId: string
  readonly activityId: string
  readonly conversationId: string
  /** Attempts made before this one. */
  readonly attempts: number
  readonly payload: Record<string, unknown>
}

/** The channel a delivery goes to, as read at the start of the loop's turn. */
export interface DeliveryChannel {
  readonly id: ChannelId
  readonly tenantId: TenantId
  readonly type: string
  readonly config: Record<string, unknown>
  readonly retryPolicy: RetryPolicy
  /**
   * The channel's secret, opened from the row the turn read (a rotation takes effect from the next
   * turn); none for a channel whose secret predates sealed secrets. Webhook signatures are keyed with it.
   */
  readonly signingSecret: Option.Option<Redacted.Redacted<string>>
}

/**
 * How one attempt ended: sent (with the receiver's message id when it gave one); worth another attempt
 * (after the receiver's `Retry-After` when it sent one); or never deliverable (a dead letter now).
 */
export type Outcome = Data.TaggedEnum<{
  Sent: { readonly providerMessageId: Option.Option<string> }
  Retry: { readonly afterMs: Option.Option<number>; readonly error: string }
  Permanent: { readonly error: string }
}>
export const Outcome = Data.taggedEnum<Outcome>()

/**
 * Sends one delivery to its channel. It never fails: every failure is an `Outcome`; the loop bounds
 * its time by the channel's `retry_policy.timeout_ms` and takes a timeout as `Retry`. The delivery id
 * is the same on every attempt (a receiver drops duplicates by it: delivery is at least once).
 */
export interface DeliverySender {
  readonly send: (delivery: DueDelivery, channel: DeliveryChannel) => Effect.Effect<Outcome>
}

/** The sender of each channel type; a type without one gets `noSender` (retried, never a fake success). */
export class DeliverySenders extends Context.Tag("parley/DeliverySenders")<DeliverySenders, {
  readonly forType: (type: string) => DeliverySender
}>() {}

/** Senders a test adds or replaces by channel type, on top of the product's (`DeliverySendersLive`). */
export class SenderOverrides extends Context.Tag("parley/SenderOverrides")<SenderOverrides, ReadonlyMap<string, DeliverySender>>() {}
