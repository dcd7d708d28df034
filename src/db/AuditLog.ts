import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { Actor } from "../auth/Actor.js"

/** One audited change. */
export interface AuditEntry {
  readonly tenantId: string | null
  readonly action: string
  readonly resourceType: string
  readonly resourceId: string | null
  readonly changes?: unknown
}

/** Writes audit rows; call it inside the transaction of the change so both commit or neither. */
export class AuditLog extends Effect.Service<AuditLog>()("parley/AuditLog", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const record = (actor: Actor, entry: AuditEntry) =>
      sql`
        INSERT INTO audit_log (id, tenant_id, actor_type, actor_id, action, resource_type, resource_id, changes)
        VALUES (${crypto.randomUUID()}, ${entry.tenantId}, ${actor.type}, ${actor.id}, ${entry.action},
                ${entry.resourceType}, ${entry.resourceId}, ${entry.changes === undefined ? null : JSON.stringify(entry.changes)})
      `.pipe(Effect.asVoid)
    return { record } as const
  })
}) {}
