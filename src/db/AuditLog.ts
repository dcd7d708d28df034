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
    const changesOf = (entry: Omit<AuditEntry, "resourceId">) => entry.changes === undefined ? null : JSON.stringify(entry.changes)
    const record = (actor: Actor, entry: AuditEntry) =>
      sql`
        INSERT INTO audit_log (id, tenant_id, actor_type, actor_id, action, resource_type, resource_id, changes)
        VALUES (${crypto.randomUUID()}, ${entry.tenantId}, ${actor.type}, ${actor.id}, ${entry.action},
                ${entry.resourceType}, ${entry.resourceId}, ${changesOf(entry)})
      `.pipe(Effect.asVoid)
    /** One row per resource, alike but for its id, in one statement whatever their number. */
    const recordEach = (actor: Actor, entry: Omit<AuditEntry, "resourceId">, resourceIds: ReadonlyArray<string>) =>
      sql`
        INSERT INTO audit_log (id, tenant_id, actor_type, actor_id, action, resource_type, resource_id, changes)
        SELECT gen_random_uuid(), ${entry.tenantId}::uuid, ${actor.type}, ${actor.id}, ${entry.action},
               ${entry.resourceType}, resource_id, ${changesOf(entry)}::jsonb
        FROM UNNEST(${resourceIds}::text[]) AS resource_id
      `.pipe(Effect.asVoid)
    /** One row per resource, each with its own changes, in one statement whatever their number. */
    const recordRows = (
      actor: Actor,
      entry: Omit<AuditEntry, "resourceId" | "changes">,
      rows: ReadonlyArray<{ readonly resourceId: string; readonly changes: unknown }>
    ) =>
      sql`
        INSERT INTO audit_log (id, tenant_id, actor_type, actor_id, action, resource_type, resource_id, changes)
        SELECT gen_random_uuid(), ${entry.tenantId}::uuid, ${actor.type}, ${actor.id}, ${entry.action},
               ${entry.resourceType}, resource_id, changes::jsonb
        FROM UNNEST(${rows.map((row) => row.resourceId)}::text[], ${rows.map((row) => JSON.stringify(row.changes))}::text[])
          AS row(resource_id, changes)
      `.pipe(Effect.asVoid)
    return { record, recordEach, recordRows } as const
  })
}) {}
