import { SqlClient, SqlSchema } from "@effect/sql"
import { Data, Effect, Option, Schema } from "effect"
import type { Actor } from "../auth/Actor.js"
import { NotFound } from "../domain/ApiError.js"
import { ChannelId, ChannelStatus } from "../domain/Channel.js"
import { TenantId } from "../domain/Tenant.js"

/**
 * The tenant a create was about to write for is gone, or (with its own key) was deactivated meanwhile.
 * Internal: each API answers it as for such a tenant.
 */
export class TenantGone extends Data.TaggedError("TenantGone")<{ readonly tenantId: TenantId }> {}

/**
 * Locks the parent row a create will reference (`FOR KEY SHARE`, in its transaction, before the
 * insert): a delete committed first leaves no row, one coming later waits for the commit (ADR 0012).
 */
export class ParentRows extends Effect.Service<ParentRows>()("parley/ParentRows", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const findTenant = SqlSchema.findOne({
      Request: TenantId,
      Result: Schema.Struct({ status: Schema.String }),
      execute: (id) => sql`SELECT status FROM tenants WHERE id = ${id} FOR KEY SHARE`
    })

    const findChannel = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: TenantId, channelId: ChannelId, lock: Schema.Boolean }),
      Result: Schema.Struct({ status: ChannelStatus }),
      // Only the channel's row: a tenant delete reaches it through the cascade, and also locking the
      // tenant's row here would take the two locks in the opposite order to that delete (deadlock).
      execute: ({ channelId, lock, tenantId }) =>
        sql`SELECT status FROM channels WHERE tenant_id = ${tenantId} AND id = ${channelId}
            ${sql.literal(lock ? "FOR KEY SHARE" : "")}`
    })

    const channelStatus = (tenantId: TenantId, channelId: ChannelId, lock: boolean) =>
      findChannel({ tenantId, channelId, lock }).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.fail(new NotFound({ message: `channel ${channelId} not found` })),
          onSome: ({ status }) => Effect.succeed(status)
        }))
      )

    /**
     * Locks the tenant's row until the transaction ends. `TenantGone` when there is none, or when
     * `actor` is the tenant's own key and the tenant is inactive (the operator may still act on it).
     */
    const lockTenant = (tenantId: TenantId, actor: Actor) =>
      findTenant(tenantId).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.fail(new TenantGone({ tenantId })),
          onSome: ({ status }) =>
            actor.type === "tenant_api" && status !== "active" ? Effect.fail(new TenantGone({ tenantId })) : Effect.void
        }))
      )

    /**
     * Locks the tenant's channel's row until the transaction ends and returns its status; 404 when
     * the tenant has no such channel.
     */
    const lockChannel = (tenantId: TenantId, channelId: ChannelId) => channelStatus(tenantId, channelId, true)

    /**
     * The tenant's channel's status as it is now, without a lock: for a read, which neither waits
     * behind a write of the channel nor marks its row; 404 when the tenant has no such channel.
     */
    const readChannel = (tenantId: TenantId, channelId: ChannelId) => channelStatus(tenantId, channelId, false)

    return { lockTenant, lockChannel, readChannel } as const
  })
}) {}
