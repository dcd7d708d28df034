import { Effect } from "effect"
import { generateCredential, hashCredential } from "../../src/auth/Credential.js"
import type { ActivityDraft } from "../../src/domain/Activity.js"
import { ChannelId } from "../../src/domain/Channel.js"
import { ConversationId } from "../../src/domain/Conversation.js"
import { query } from "./TestDatabase.js"
import { createTenant, request } from "./TestNode.js"

/** A channel stored directly (the management API has its own tests); returns its id and secret. */
export const insertChannel = (tenantId: string, fields: { readonly mode?: string; readonly type?: string } = {}) =>
  Effect.gen(function*() {
    const id = ChannelId.to.make(crypto.randomUUID())
    const secret = generateCredential("channelSecret")
    yield* query(
      `INSERT INTO channels (id, tenant_id, name, type, mode, config, secret_hash)
       VALUES ($1, $2, $3, $4, $5, '{"url":"http://127.0.0.1:9/hook"}', $6)`,
      [id, tenantId, `channel-${id.slice(0, 8)}`, fields.type ?? "webhook", fields.mode ?? "duplex", hashCredential(secret)]
    )
    return { id, secret }
  })

/** A conversation stored directly on a channel (origin), with its channel link; a new id unless one is given. */
export const insertConversation = (
  tenantId: string,
  channelId: string,
  fields: { readonly metadata?: object; readonly id?: string } = {}
) =>
  Effect.gen(function*() {
    const id = ConversationId.to.make(fields.id ?? crypto.randomUUID())
    yield* query(
      `INSERT INTO conversations (id, tenant_id, channel_id, origin_channel_id, metadata) VALUES ($1, $2, $3, $3, $4)`,
      [id, tenantId, channelId, JSON.stringify(fields.metadata ?? {})]
    )
    yield* query(`INSERT INTO conversation_channels (conversation_id, channel_id, role) VALUES ($1, $2, 'origin')`, [
      id,
      channelId
    ])
    return id
  })

/** A tenant with one channel and one conversation on it. */
export const tenantWithConversation = Effect.gen(function*() {
  const tenant = yield* createTenant()
  const channel = yield* insertChannel(tenant.id)
  const conversationId = yield* insertConversation(tenant.id, channel.id)
  return { tenant, channel, conversationId, key: tenant.api_key }
})

/** A tenant API call with an API key. */
export const tenantApi = (
  key: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {}
) => request(method, `/api/v1${path}`, { ...(body === undefined ? {} : { body }), headers: { "x-api-key": key, ...headers } })

/** The tenant API routes of one conversation (paths under `/api/v1`), with a valid body where one is sent. */
export const conversationRoutes = (id: string) =>
  [
    ["GET", `/conversations/${id}`, undefined],
    ["POST", `/conversations/${id}/close`, undefined],
    ["POST", `/conversations/${id}/reopen`, undefined],
    ["GET", `/conversations/${id}/activities`, undefined],
    ["POST", `/conversations/${id}/activities`, { text: "hi" }]
  ] as const

/** A user's plain message as the conversation entity receives it (every field already checked). */
export const messageDraft = (text: string, idempotencyKey: string | null = null): ActivityDraft => ({
  id: crypto.randomUUID(),
  type: "message",
  sender: "user",
  text,
  attachments: [],
  metadata: {},
  idempotency_key: idempotencyKey,
  reply_to_id: null,
  message_type: null,
  payload: null,
  source_channel_id: null
})

/** A conversation's stored activities as `[seq, text]`, in seq order. */
export const storedTexts = (conversationId: string) =>
  Effect.map(
    query<{ seq: string; text: string }>("SELECT seq, text FROM activities WHERE conversation_id = $1 ORDER BY seq", [conversationId]),
    (rows) => rows.map((r) => [Number(r.seq), r.text] as const)
  )

/**
 * Everything a request can write for a conversation: its row (status, head, times), how many
 * activities and delivery rows it has, and each activity's edit and delete marks. Equal before and
 * after a refused request, it proves that the request stored nothing.
 */
export const storedState = (conversationId: string) =>
  Effect.map(
    query(
      `SELECT c.status, c.head_seq::int AS head_seq, c.closed_at, c.updated_at,
              (SELECT count(*)::int FROM activities a WHERE a.conversation_id = c.id) AS activities,
              (SELECT count(*)::int FROM deliveries d WHERE d.conversation_id = c.id) AS deliveries,
              (SELECT coalesce(json_agg(json_build_array(a.seq, a.edited_at, a.deleted_at) ORDER BY a.seq), '[]')
                 FROM activities a WHERE a.conversation_id = c.id) AS marks
         FROM conversations c WHERE c.id = $1`,
      [conversationId]
    ),
    (rows) => rows[0]
  )
