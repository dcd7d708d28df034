import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { ParentRows } from "../db/ParentRows.js"
import { inTransaction } from "../db/Transaction.js"
import { ChannelInactive } from "../domain/ApiError.js"
import type { ActivityId } from "../domain/Activity.js"
import { ChannelId } from "../domain/Channel.js"
import { Conversation, ConversationChannel, ConversationId, Participant } from "../domain/Conversation.js"
import { TenantId } from "../domain/Tenant.js"

const Row = Schema.Struct({
  id: ConversationId,
  status: Schema.Literal("active", "closed"),
  metadata: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  channel_id: ChannelId,
  origin_channel_id: ChannelId,
  tenant_id: TenantId,
  participant_id: Schema.NullOr(Schema.String),
  inserted_at: Schema.String,
  updated_at: Schema.String,
  p_id: Schema.NullOr(Schema.String),
  p_external_id: Schema.NullOr(Schema.String),
  p_display_name: Schema.NullOr(Schema.String),
  p_opted_out_at: Schema.NullOr(Schema.String)
})
type Row = typeof Row.Type

const toConversation = (row: Row, withParticipant: boolean) =>
  new Conversation({
    id: row.id,
    status: row.status,
    metadata: row.metadata,
    channel_id: row.channel_id,
    origin_channel_id: row.origin_channel_id,
    tenant_id: row.tenant_id,
    participant_id: row.participant_id,
    participant: withParticipant && row.p_id !== null
      ? new Participant({
        id: row.p_id,
        external_id: row.p_external_id!,
        display_name: row.p_display_name,
        opted_out_at: row.p_opted_out_at
      })
      : null,
    inserted_at: row.inserted_at,
    updated_at: row.updated_at
  })

const SELECT = `
  SELECT c.id, c.status, c.metadata, c.channel_id, c.origin_channel_id, c.tenant_id, c.participant_id,
         c.inserted_at, c.updated_at, p.id AS p_id, p.external_id AS p_external_id,
         p.display_name AS p_display_name, p.opted_out_at AS p_opted_out_at
  FROM conversations c LEFT JOIN participants p ON p.id = c.participant_id`

/** Filters of `GET /conversations`. */
export interface ListFilter {
  readonly tenantId: TenantId
  readonly status: "active" | "closed" | null
  readonly channelId: ChannelId | null
  readonly externalId: string | null
  /** Keyset position: (inserted_at, id) of the last row of the previous page. */
  readonly after: readonly [string, string] | null
  readonly limit: number
}

/** Filters of the client API's `GET /conversations`: one channel, most recently active first. */
export interface ChannelListFilter {
  readonly tenantId: TenantId
  readonly channelId: ChannelId
  readonly status: "active" | "closed" | null
  /** Only conversations updated at or after this instant (ISO 8601). */
  readonly updatedSince: string | null
  /** Keyset position: (updated_at, id) of the last row of the previous page. */
  readonly after: readonly [string, string] | null
  readonly limit: number
}

/** How far back from the head a list looks for a conversation's latest message: a bounded look per row. */
export const LAST_MESSAGE_WINDOW = 1000

/** A conversation in a channel's list, with its party and latest message. */
export const ConversationSummary = Schema.Struct({
  id: ConversationId,
  status: Schema.Literal("active", "closed"),
  metadata: Schema.Record({ key: Schema.String, value: Schema.Unknown }),
  head_seq: Schema.NumberFromString,
  inserted_at: Schema.String,
  updated_at: Schema.String,
  p_external_id: Schema.NullOr(Schema.String),
  p_display_name: Schema.NullOr(Schema.String),
  last_text: Schema.NullOr(Schema.String),
  last_deleted: Schema.NullOr(Schema.Boolean),
  last_at: Schema.NullOr(Schema.String)
})
export type ConversationSummary = typeof ConversationSummary.Type

/** Reads and creates conversations; appends go through the conversation entity. */
export class ConversationRepo extends Effect.Service<ConversationRepo>()("parley/ConversationRepo", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const parents = yield* ParentRows

    const findRow = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: TenantId, id: ConversationId }),
      Result: Row,
      execute: ({ id, tenantId }) => sql`${sql.literal(SELECT)} WHERE c.id = ${id} AND c.tenant_id = ${tenantId}`
    })

    const channelsOf = SqlSchema.findAll({
      Request: ConversationId,
      Result: ConversationChannel,
      execute: (id) =>
        sql`SELECT channel_id, role, participant_id, inserted_at FROM conversation_channels
            WHERE conversation_id = ${id} ORDER BY inserted_at, channel_id`
    })

    /** The conversation with its participant, and with `channels` when asked. */
    const find = (tenantId: TenantId, id: ConversationId, options: { readonly participant: boolean; readonly channels: boolean }) =>
      findRow({ tenantId, id }).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.succeedNone,
          onSome: (row) =>
            options.channels
              ? Effect.map(channelsOf(id), (channels) =>
                Option.some(new Conversation({ ...toConversation(row, options.participant), channels })))
              : Effect.succeedSome(toConversation(row, options.participant))
        }))
      )

    const listRows = SqlSchema.findAll({
      Request: Schema.Any,
      Result: Row,
      execute: (f: ListFilter) =>
        sql`${sql.literal(SELECT)}
            WHERE c.tenant_id = ${f.tenantId}
              ${f.status === null ? sql`` : sql`AND c.status = ${f.status}`}
              ${f.channelId === null ? sql`` : sql`AND c.channel_id = ${f.channelId}`}
              ${f.externalId === null ? sql`` : sql`AND p.external_id = ${f.externalId}`}
              ${f.after === null ? sql`` : sql`AND (c.inserted_at, c.id) < (${f.after[0]}::timestamptz, ${f.after[1]}::uuid)`}
            ORDER BY c.inserted_at DESC, c.id DESC
            LIMIT ${f.limit + 1}`
    })

    /** One page, newest first; `hasMore` when a further row exists. */
    const list = (filter: ListFilter) =>
      Effect.map(listRows(filter), (rows) => ({
        items: rows.slice(0, filter.limit).map((row) => toConversation(row, true)),
        hasMore: rows.length > filter.limit
      }))

    const channelRows = SqlSchema.findAll({
      Request: Schema.Any,
      Result: ConversationSummary,
      execute: (f: ChannelListFilter) =>
        sql`SELECT c.id, c.status, c.metadata, c.head_seq, c.inserted_at, c.updated_at,
                   p.external_id AS p_external_id, p.display_name AS p_display_name,
                   m.text AS last_text, m.deleted AS last_deleted, m.inserted_at AS last_at
            FROM conversations c
            LEFT JOIN participants p ON p.id = c.participant_id
            LEFT JOIN LATERAL (
              SELECT a.text, a.deleted_at IS NOT NULL AS deleted, a.inserted_at FROM activities a
              WHERE a.conversation_id = c.id AND a.type = 'message' AND a.seq > c.head_seq - ${LAST_MESSAGE_WINDOW}
              ORDER BY a.seq DESC LIMIT 1
            ) m ON true
            WHERE c.tenant_id = ${f.tenantId} AND c.channel_id = ${f.channelId}
              ${f.status === null ? sql`` : sql`AND c.status = ${f.status}`}
              ${f.updatedSince === null ? sql`` : sql`AND c.updated_at >= ${f.updatedSince}::timestamptz`}
              ${f.after === null ? sql`` : sql`AND (c.updated_at, c.id) < (${f.after[0]}::timestamptz, ${f.after[1]}::uuid)`}
            ORDER BY c.updated_at DESC, c.id DESC
            LIMIT ${f.limit + 1}`
    })

    /** One page of a channel's conversations, most recently active first; `hasMore` when a further row exists. */
    const listForChannel = (filter: ChannelListFilter) =>
      Effect.map(channelRows(filter), (rows) => ({ items: rows.slice(0, filter.limit), hasMore: rows.length > filter.limit }))

    /** The channel's participant with this external id, made when it is new. */
    const participantOf = (tenantId: TenantId, channelId: ChannelId, externalId: string) =>
      Effect.map(
        sql<{ id: string }>`
          INSERT INTO participants (id, tenant_id, channel_id, external_id)
          VALUES (${crypto.randomUUID()}, ${tenantId}, ${channelId}, ${externalId})
          ON CONFLICT (channel_id, external_id) DO UPDATE SET updated_at = now()
          RETURNING id`,
        (rows) => rows[0]?.id ?? null
      )

    /**
     * Creates a conversation linked to its origin channel, which must exist (404) and be active (400
     * `channel_inactive`) at commit; with `participant`, that participant (made if new) is its party.
     */
    const create = (input: {
      readonly tenantId: TenantId
      readonly channelId: ChannelId
      readonly status: "active" | "closed"
      readonly metadata: Record<string, unknown>
      readonly participant?: string | undefined
    }) =>
      Effect.gen(function*() {
        const status = yield* parents.lockChannel(input.tenantId, input.channelId)
        if (status !== "active") {
          return yield* new ChannelInactive({ message: `channel ${input.channelId} is inactive` })
        }
        const id = ConversationId.to.make(crypto.randomUUID())
        const participantId = input.participant === undefined
          ? null
          : yield* participantOf(input.tenantId, input.channelId, input.participant)
        yield* sql`
          INSERT INTO conversations (id, tenant_id, channel_id, origin_channel_id, participant_id, status, metadata, closed_at)
          VALUES (${id}, ${input.tenantId}, ${input.channelId}, ${input.channelId}, ${participantId}, ${input.status},
                  ${JSON.stringify(input.metadata)}::jsonb, ${input.status === "closed" ? sql`now()` : null})`
        yield* sql`
          INSERT INTO conversation_channels (conversation_id, channel_id, role, participant_id)
          VALUES (${id}, ${input.channelId}, 'origin', ${participantId})`
        const row = yield* findRow({ tenantId: input.tenantId, id })
        return yield* Option.match(row, {
          onNone: () => Effect.dieMessage("a conversation just inserted cannot be read back"),
          onSome: (found) => Effect.succeed(toConversation(found, input.participant !== undefined))
        })
      }).pipe(inTransaction(sql))

    const TargetRow = Schema.Struct({
      conversation_id: Schema.String,
      type: Schema.String,
      sender: Schema.String,
      deleted: Schema.Boolean
    })
    // Scoped to the tenant: another tenant's activity is as unknown as a missing one.
    const findTarget = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: TenantId, id: Schema.String }),
      Result: TargetRow,
      execute: ({ id, tenantId }) => sql`SELECT conversation_id, type, sender, deleted_at IS NOT NULL AS deleted FROM activities WHERE id = ${id} AND tenant_id = ${tenantId}`
    })

    const SeqRow = Schema.Struct({ seq: Schema.NumberFromString })
    const findSeq = SqlSchema.findOne({
      Request: Schema.Struct({ conversationId: ConversationId, id: Schema.String }),
      Result: SeqRow,
      execute: ({ conversationId, id }) =>
        sql`SELECT seq FROM activities WHERE conversation_id = ${conversationId} AND id = ${id}`
    })

    return {
      find,
      list,
      listForChannel,
      create,
      /** The conversation and sender of a tenant's activity, for `reply_to_id` rules. */
      findTarget: (tenantId: TenantId, id: ActivityId) => findTarget({ tenantId, id }),
      /** The seq of an activity of the conversation (legacy watermark form). */
      seqOf: (conversationId: ConversationId, id: ActivityId) => Effect.map(findSeq({ conversationId, id }), Option.map((r) => r.seq))
    } as const
  }),
  dependencies: [ParentRows.Default]
}) {}
