import type { SqlClient } from "@effect/sql"
import { prepared } from "../db/PreparedStatements.js"
import { deliveryRow, type PlannedDelivery } from "../delivery/DeliveryRows.js"
import type { Activity, ActivityDraft } from "../domain/Activity.js"
import type { ConversationId } from "../domain/Conversation.js"
import type { TenantId } from "../domain/Tenant.js"

/**
 * Consecutive activities of one conversation written atomically: they take seqs
 * `oldHead + 1 …`, and the conversation's head moves from `oldHead` only if nobody moved it first.
 */
export interface WriteGroup {
  readonly conversationId: ConversationId
  readonly tenantId: TenantId
  readonly oldHead: number
  readonly activities: ReadonlyArray<ActivityDraft>
  readonly deliveries: ReadonlyArray<PlannedDelivery>
  /** A status the conversation takes with this group (close and reopen). */
  readonly status: "active" | "closed" | null
  /** Epoch ms after which no statement may start writing the group (WriteTimings). */
  readonly deadline: number
  /** API key ids the statement finds valid before it writes the group (ADR 0015). */
  readonly keyChecks: ReadonlyArray<string>
}

/** The activity a draft became, fields in the order of `Activity`; the draft's values are checked. */
export const storedActivity = (draft: ActivityDraft, seq: number, group: WriteGroup, insertedAt: string): Activity => ({
  id: draft.id,
  type: draft.type,
  sender: draft.sender,
  text: draft.text,
  attachments: draft.attachments,
  metadata: draft.metadata,
  idempotency_key: draft.idempotency_key,
  seq,
  reply_to_id: draft.reply_to_id,
  message_type: draft.message_type,
  payload: draft.payload,
  source_channel_id: draft.source_channel_id,
  edited_at: null,
  deleted_at: null,
  conversation_id: group.conversationId,
  tenant_id: group.tenantId,
  inserted_at: insertedAt
})

/** A group's activity rows as the batch statement reads them. */
const activityRows = (g: WriteGroup) =>
  // Field by field, as the statement's record set names them: a spread with fields added is slow in V8.
  g.activities.map((a, i) => ({
    conversation_id: g.conversationId,
    seq: g.oldHead + 1 + i,
    id: a.id,
    tenant_id: g.tenantId,
    type: a.type,
    sender: a.sender,
    text: a.text,
    attachments: a.attachments,
    metadata: a.metadata,
    idempotency_key: a.idempotency_key,
    reply_to_id: a.reply_to_id,
    message_type: a.message_type,
    payload: a.payload,
    source_channel_id: a.source_channel_id
  }))

/** A group's planned deliveries; their payloads are the channels' copies as stored (the statement fills in `inserted_at`). */
const deliveryRows = (g: WriteGroup) =>
  g.deliveries.map((d) => {
    const i = g.activities.findIndex((a) => a.id === d.activityId)
    return deliveryRow(d, storedActivity(d.copy, g.oldHead + 1 + i, g, ""))
  })

/** The channels a group's routed deliveries go to, once each (most groups: none). */
const targetLinks = (g: WriteGroup) => {
  const links: Array<{ conversation_id: string; channel_id: string }> = []
  for (const d of g.deliveries) {
    if (d.routed && !links.some((link) => link.channel_id === d.channelId)) {
      links.push({ conversation_id: g.conversationId, channel_id: d.channelId })
    }
  }
  return links
}

/** The rows of groups as the statement's JSON documents; `targets` is null when nothing was routed. */
export const encodeRows = (groups: ReadonlyArray<WriteGroup>) => {
  const rows = JSON.stringify(groups.flatMap(activityRows))
  const planned = JSON.stringify(groups.flatMap(deliveryRows))
  const links = groups.flatMap(targetLinks)
  const targets = links.length === 0 ? null : JSON.stringify(links)
  return { rows, planned, targets, size: rows.length + planned.length + (targets?.length ?? 0) }
}

/** The rows of a batch, encoded once: their size decides how many groups one statement carries. */
export type EncodedRows = ReturnType<typeof encodeRows>

/** What the batch statement answers per conversation; a group absent from the answer lost its head. */
export interface BatchAnswer {
  readonly id: string
  /** The statement's `now()` as the API formats timestamps, on `moved` rows. */
  readonly at: string | null
  readonly outcome: "moved" | "key_taken" | "late" | "key_refused"
}

/**
 * Writes groups in one statement: a group moves its head only if it still is `oldHead` and its key is
 * not stored, and only moved groups get their rows; a unique violation fails the whole statement.
 */
export const batchStatement = (writer: SqlClient.SqlClient, groups: ReadonlyArray<WriteGroup>, encoded: EncodedRows) => {
  // Each set of rows goes as one JSON document: no per-value array escaping on either side.
  const heads = groups.map((g) => ({
    id: g.conversationId,
    old_head: g.oldHead,
    new_head: g.oldHead + g.activities.length,
    status: g.status,
    deadline: g.deadline,
    key_checks: g.keyChecks
  }))
  const edits: Array<string | null> = []
  const deletes: Array<string | null> = []
  const keyedConversations: Array<string> = []
  const keys: Array<string> = []
  for (const g of groups) {
    for (const a of g.activities) {
      if (a.type === "messageUpdate") edits.push(a.reply_to_id)
      else if (a.type === "messageDelete") deletes.push(a.reply_to_id)
      if (a.idempotency_key !== null) {
        keyedConversations.push(g.conversationId)
        keys.push(a.idempotency_key)
      }
    }
  }
  const targets = [...edits, ...deletes]
  // Edits and deletes are rare: only a batch with some carries the part that marks their targets,
  // found by id. The moved conversations are a filter the index cannot use (`IS TRUE`): as an
  // index condition they could make the plan read every activity of each conversation written.
  const marks = targets.length === 0 ? writer.literal("") : writer`, marked AS (
      UPDATE activities a
      SET edited_at = CASE WHEN a.id = ANY(${edits}::uuid[]) THEN now() ELSE a.edited_at END,
          deleted_at = CASE WHEN a.id = ANY(${deletes}::uuid[]) THEN COALESCE(a.deleted_at, now()) ELSE a.deleted_at END
      WHERE a.id = ANY(${targets}::uuid[]) AND (a.conversation_id = ANY(ARRAY(SELECT id FROM moved))) IS TRUE
    )`
  // Routed groups link their conversation to each target channel (role `target`, GET /conversations/:id).
  const links = encoded.targets === null ? writer.literal("") : writer`, linked AS (
      INSERT INTO conversation_channels (conversation_id, channel_id, role)
      SELECT t.conversation_id, t.channel_id, 'target'
      FROM jsonb_to_recordset(${encoded.targets}::jsonb) AS t(conversation_id uuid, channel_id uuid)
      WHERE t.conversation_id IN (SELECT id FROM moved)
        AND EXISTS (SELECT 1 FROM channels ch WHERE ch.id = t.channel_id AND ch.mode <> 'inbound')
      ON CONFLICT (conversation_id, channel_id) DO NOTHING
    )`
  const name = `append_batch${targets.length === 0 ? "" : "_with_marks"}${encoded.targets === null ? "" : "_with_links"}`
  return writer<BatchAnswer>`${writer.literal(prepared(name))}
    WITH heads AS (
      SELECT * FROM jsonb_to_recordset(${JSON.stringify(heads)}::jsonb)
               AS v(id uuid, old_head int8, new_head int8, status text, deadline int8, key_checks jsonb)
    ), late AS (
      -- The fence of WriteTimings: a statement PostgreSQL starts past a group's deadline (it
      -- waited in a stalled backend, say) writes nothing of it, whenever it runs.
      SELECT id FROM heads WHERE statement_timestamp() > to_timestamp(deadline / 1000.0)
    ), refused AS (
      -- API keys taken from a node's recent lookups are checked where the write commits: one
      -- revoked, expired or of a tenant no longer active writes nothing (ADR 0015).
      SELECT v.id FROM heads v
      WHERE v.id NOT IN (SELECT id FROM late) AND EXISTS (
        SELECT 1 FROM jsonb_array_elements_text(v.key_checks) AS k(id)
        WHERE NOT EXISTS (SELECT 1 FROM api_keys ak JOIN tenants t ON t.id = ak.tenant_id
                          WHERE ak.id = k.id::uuid AND ak.revoked_at IS NULL
                            AND (ak.expires_at IS NULL OR ak.expires_at > now()) AND t.status = 'active'))
    ), known AS (
      -- One index probe per key: a join here may be planned as a scan of the whole index.
      SELECT DISTINCT k.conversation_id
      FROM UNNEST(${keyedConversations}::uuid[], ${keys}::text[])
           AS k(conversation_id, key),
           LATERAL (SELECT 1 FROM activities a
                    WHERE a.conversation_id = k.conversation_id AND a.idempotency_key = k.key LIMIT 1) AS stored_key
    ), moved AS (
      UPDATE conversations c
      SET head_seq = v.new_head, updated_at = now(),
          status = COALESCE(v.status, c.status),
          closed_at = CASE WHEN v.status = 'closed' THEN now() WHEN v.status = 'active' THEN NULL ELSE c.closed_at END
      FROM heads v
      WHERE c.id = ANY(${groups.map((g) => g.conversationId)}::uuid[]) AND c.id = v.id AND c.head_seq = v.old_head
        AND c.id NOT IN (SELECT conversation_id FROM known) AND c.id NOT IN (SELECT id FROM late)
        AND c.id NOT IN (SELECT id FROM refused)
      RETURNING c.id
    ), clock AS (
      SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at
    ), stored AS (
      INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text, attachments, metadata,
                              idempotency_key, reply_to_id, message_type, payload, source_channel_id)
      SELECT t.conversation_id, t.seq, t.id, t.tenant_id, t.type, t.sender, t.text, t.attachments, t.metadata,
             t.idempotency_key, t.reply_to_id, t.message_type, t.payload, t.source_channel_id
      FROM jsonb_to_recordset(${encoded.rows}::jsonb)
           AS t(conversation_id uuid, seq int8, id uuid, tenant_id uuid, type text, sender text, text text,
                attachments jsonb, metadata jsonb, idempotency_key text, reply_to_id uuid, message_type text,
                payload jsonb, source_channel_id uuid)
      WHERE t.conversation_id IN (SELECT id FROM moved)
    ), planned AS (
      INSERT INTO deliveries (id, tenant_id, activity_id, conversation_id, channel_id, payload, next_attempt_at)
      SELECT t.id, t.tenant_id, t.activity_id, t.conversation_id, t.channel_id,
             jsonb_set(t.payload, '{inserted_at}', to_jsonb((SELECT at FROM clock))), now()
      FROM jsonb_to_recordset(${encoded.planned}::jsonb)
           AS t(id uuid, tenant_id uuid, activity_id uuid, conversation_id uuid, channel_id uuid, payload jsonb)
      WHERE t.conversation_id IN (SELECT id FROM moved)
        AND EXISTS (SELECT 1 FROM channels ch WHERE ch.id = t.channel_id AND ch.mode <> 'inbound')
    )${marks}${links}
    SELECT moved.id, clock.at, 'moved' AS outcome FROM moved, clock
    UNION ALL
    SELECT id, NULL, 'late' FROM late
    UNION ALL
    SELECT id, NULL, 'key_refused' FROM refused
    UNION ALL
    SELECT conversation_id, NULL, 'key_taken' FROM known
    WHERE conversation_id NOT IN (SELECT id FROM late) AND conversation_id NOT IN (SELECT id FROM refused)`
}
