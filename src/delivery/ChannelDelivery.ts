import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { TenantCredential } from "../auth/TenantCredential.js"
import { AuditLog } from "../db/AuditLog.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { inTransaction } from "../db/Transaction.js"
import type { ChannelId } from "../domain/Channel.js"
import type { ChannelDeliverySummary, CircuitState } from "../domain/Delivery.js"
import { ChannelDeliveries } from "./ChannelDeliveries.js"
import { channelNotFound, lookupDeliveryChannel } from "./DeliveryChannelLookup.js"

/** A channel's delivery state as the tenant API shows it, and its manual pause and resume. */
export class ChannelDelivery extends Effect.Service<ChannelDelivery>()("parley/ChannelDelivery", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* AuditLog
    const loops = yield* ChannelDeliveries

    /** Breaker, rate limit and how many deliveries wait (`pending`) or are dead letters (`failed`). */
    const summary = (credential: TenantCredential, id: ChannelId) =>
      Effect.gen(function*() {
        const channel = yield* lookupDeliveryChannel(sql, credential, id)
        // Both counts are read from partial indexes (`deliveries_due`, `deliveries_failed`).
        const counts = yield* sql<{ pending: number; failed: number }>`
          SELECT (SELECT count(*)::int FROM deliveries WHERE channel_id = ${id} AND status = 'pending') AS pending,
                 (SELECT count(*)::int FROM deliveries WHERE channel_id = ${id} AND status = 'failed') AS failed`
        return {
          channel_id: channel.id,
          circuit_state: channel.circuit_state,
          paused: channel.circuit_state === "paused",
          pending: counts[0]?.pending ?? 0,
          failed: counts[0]?.failed ?? 0,
          rate_limit: channel.rate_limit
        } satisfies ChannelDeliverySummary
      }).pipe(orUnavailable)

    /**
     * Sets the breaker by hand: `paused` parks the channel's deliveries, `closed` (resume) also
     * closes an open or half-open breaker; both forget the count of consecutive failures. Audited as
     * `channel.paused` / `channel.resumed`. After a resume's commit the channel's loop looks at once.
     */
    const setManually = (credential: TenantCredential, id: ChannelId, state: "paused" | "closed") =>
      Effect.gen(function*() {
        yield* lookupDeliveryChannel(sql, credential, id)
        const rows = yield* sql<{ id: string; previous: CircuitState }>`
          UPDATE channels c SET circuit_state = ${state}, circuit_failures = 0, updated_at = now()
          FROM (SELECT id, circuit_state FROM channels WHERE id = ${id} AND tenant_id = ${credential.tenantId} FOR UPDATE) old
          WHERE c.id = old.id
          RETURNING c.id, old.circuit_state AS previous`
        const row = rows[0]
        if (row === undefined) return yield* Effect.fail(channelNotFound(id))
        yield* audit.record(credential.actor, {
          tenantId: credential.tenantId,
          action: state === "paused" ? "channel.paused" : "channel.resumed",
          resourceType: "channel",
          resourceId: id,
          changes: { circuit_state: [row.previous, state] }
        })
        return { channel_id: row.id, circuit_state: state as CircuitState }
      }).pipe(
        inTransaction(sql),
        orUnavailable,
        // A paused loop has stopped and an open one waits out its cool-down: neither would see the
        // resume before the sweep or the cool-down's end.
        Effect.tap(() => state === "closed" ? loops.recheck(id) : Effect.void)
      )

    return {
      summary,
      pause: (credential: TenantCredential, id: ChannelId) => setManually(credential, id, "paused"),
      resume: (credential: TenantCredential, id: ChannelId) => setManually(credential, id, "closed")
    } as const
  }),
  dependencies: [AuditLog.Default]
}) {}
