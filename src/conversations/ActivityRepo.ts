import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { inTransaction } from "../db/Transaction.js"
import { ConversationId } from "../domain/Conversation.js"
import { TenantId } from "../domain/Tenant.js"
import { ACTIVITY_COLUMNS, ActivityFromRow } from "./ActivityRows.js"
import { IN_FLIGHT_WAIT_MS } from "./WriteTimings.js"

/**
 * The reads of stored activities and conversation heads, on the node's pool: the lookups that settle
 * a write whose answer was lost, the pages of a conversation and the heads its followers compare.
 */
export class ActivityRepo extends Effect.Service<ActivityRepo>()("parley/ActivityRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const findActivities = SqlSchema.findAll({
      Request: Schema.Struct({
        tenantId: TenantId,
        conversationId: ConversationId,
        ids: Schema.Array(Schema.String),
        keys: Schema.Array(Schema.String)
      }),
      Result: ActivityFromRow,
      execute: ({ conversationId, ids, keys, tenantId }) =>
        sql`SELECT ${sql.literal(ACTIVITY_COLUMNS)} FROM activities
            WHERE conversation_id = ${conversationId} AND tenant_id = ${tenantId}
              AND (id = ANY(${ids}::uuid[]) OR idempotency_key = ANY(${keys}::text[]))`
    })

    /**
     * Activities of the tenant's conversation already stored under any of these ids or idempotency
     * keys (another tenant's conversation has none).
     */
    const findExisting = (tenantId: TenantId, conversationId: ConversationId, ids: ReadonlyArray<string>, keys: ReadonlyArray<string>) =>
      findActivities({ tenantId, conversationId, ids, keys })

    /**
     * `findExisting` once no write of the conversation is in flight, within the tenant's own rows. Waiting
     * for the row a write holds until commit makes visible a commit PostgreSQL was holding up (ADR 0004).
     */
    const findSettled = (
      tenantId: TenantId,
      conversationId: ConversationId,
      ids: ReadonlyArray<string>,
      keys: ReadonlyArray<string>
    ) =>
      inTransaction(sql)(
        sql`SELECT set_config('lock_timeout', ${`${IN_FLIGHT_WAIT_MS}ms`}, true)`.pipe(
          Effect.zipRight(
            sql`SELECT 1 FROM conversations WHERE id = ${conversationId} AND tenant_id = ${tenantId} FOR SHARE`
          ),
          // A statement of its own: its snapshot is taken after the wait.
          Effect.zipRight(findActivities({ tenantId, conversationId, ids, keys }))
        )
      )

    /**
     * The tenant's conversation's status once no write of it is in flight (as `findSettled` waits),
     * for a close or reopen whose answer was lost; undefined when there is no such conversation.
     */
    const statusSettled = (tenantId: TenantId, conversationId: ConversationId) =>
      inTransaction(sql)(
        sql`SELECT set_config('lock_timeout', ${`${IN_FLIGHT_WAIT_MS}ms`}, true)`.pipe(
          // After the wait, FOR SHARE reads the row as the write left it.
          Effect.zipRight(sql<{ status: string }>`
            SELECT status FROM conversations WHERE id = ${conversationId} AND tenant_id = ${tenantId} FOR SHARE`),
          Effect.map((rows) => rows[0]?.status)
        )
      )

    const readRange = SqlSchema.findAll({
      Request: Schema.Struct({
        conversationId: ConversationId,
        after: Schema.Number,
        before: Schema.Number,
        limit: Schema.Number,
        newestFirst: Schema.Boolean
      }),
      Result: ActivityFromRow,
      execute: ({ after, before, conversationId, limit, newestFirst }) =>
        sql`SELECT ${sql.literal(ACTIVITY_COLUMNS)} FROM activities
            WHERE conversation_id = ${conversationId} AND seq > ${after} AND seq < ${before}
            ORDER BY seq ${sql.literal(newestFirst ? "DESC" : "ASC")} LIMIT ${limit}`
    })

    /** Up to `limit` activities with seq above `after`, oldest first. */
    const readAfter = (conversationId: ConversationId, after: number, limit: number) =>
      readRange({ conversationId, after, before: Number.MAX_SAFE_INTEGER, limit, newestFirst: false })

    /**
     * Up to `limit` activities with seq above `after` and below `before`: the oldest of them first, or
     * with `newestFirst` the newest of them, newest first (backward paging).
     */
    const readBetween = (
      conversationId: ConversationId,
      range: { readonly after: number; readonly before: number; readonly newestFirst: boolean },
      limit: number
    ) => readRange({ conversationId, ...range, limit })

    const findDeleted = SqlSchema.findAll({
      Request: Schema.Struct({ conversationId: ConversationId, ids: Schema.Array(Schema.String) }),
      Result: Schema.Struct({ id: Schema.String }),
      execute: ({ conversationId, ids }) =>
        sql`SELECT id FROM activities
            WHERE conversation_id = ${conversationId} AND id = ANY(${ids}::uuid[]) AND deleted_at IS NOT NULL`
    })

    /** Which of these activities of the conversation are deleted messages. */
    const deletedAmong = (conversationId: ConversationId, ids: ReadonlyArray<string>) =>
      Effect.map(findDeleted({ conversationId, ids }), (rows): ReadonlySet<string> => new Set(rows.map((row) => row.id)))

    const HeadRow = Schema.Struct({ id: ConversationId, head_seq: Schema.NumberFromString })
    const findHeads = SqlSchema.findAll({
      Request: Schema.Array(ConversationId),
      Result: HeadRow,
      execute: (ids) => sql`SELECT id, head_seq FROM conversations WHERE id = ANY(${ids}::uuid[])`
    })

    /** The committed head seqs of these conversations, by id (missing ones are absent). */
    const headsOf = (conversationIds: ReadonlyArray<ConversationId>) =>
      Effect.map(findHeads(conversationIds), (rows) => new Map(rows.map((row) => [row.id, row.head_seq])))

    /** The committed head seq of a conversation (0 when it has none or does not exist). */
    const headOf = (conversationId: ConversationId) =>
      Effect.map(headsOf([conversationId]), (heads) => heads.get(conversationId) ?? 0)

    return { findExisting, findSettled, statusSettled, deletedAmong, readAfter, readBetween, headOf, headsOf } as const
  })
}) {}

