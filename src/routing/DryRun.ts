import { SqlClient } from "@effect/sql"
import { Effect, Either, Schema } from "effect"
import type { TenantCredential } from "../auth/TenantCredential.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { checkActivity } from "../conversations/ActivityRules.js"
import { NotFound } from "../domain/ApiError.js"
import { Problems } from "../domain/Problems.js"
import { isUuid } from "../domain/Uuid.js"
import type { RoutingSubject } from "./Conditions.js"
import { RoutingRules } from "./RoutingRules.js"

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

/** `POST /routing_rules/dry_run` (server-apis.md): not wrapped; the activity is checked like a posted one (422). */
export const DryRunBody = Schema.Struct({
  activity: Schema.Struct({
    type: Schema.optional(Schema.Unknown),
    text: Schema.optional(Schema.Unknown),
    sender: Schema.optional(Schema.Unknown),
    metadata: Schema.optional(Schema.Unknown),
    attachments: Schema.optional(Schema.Unknown),
    reply_to_id: Schema.optional(Schema.Unknown),
    message_type: Schema.optional(Schema.Unknown),
    payload: Schema.optional(Schema.Unknown)
  }),
  source_channel_id: Schema.optional(Schema.String),
  conversation_id: Schema.optional(Schema.String),
  origin_channel_id: Schema.optional(Schema.String),
  conversation: Schema.optional(Schema.Struct({ metadata: Schema.optional(JsonObject) })),
  participant: Schema.optional(Schema.Struct({
    external_id: Schema.optional(Schema.NullOr(Schema.String)),
    display_name: Schema.optional(Schema.NullOr(Schema.String)),
    metadata: Schema.optional(JsonObject)
  })),
  at: Schema.optional(Schema.String)
})
export type DryRunBody = typeof DryRunBody.Type

const ISO_8601 = /^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$/

const ConversationRow = Schema.Struct({
  origin_channel_id: Schema.String,
  metadata: JsonObject,
  external_id: Schema.NullOr(Schema.String),
  display_name: Schema.NullOr(Schema.String),
  participant_metadata: Schema.NullOr(JsonObject),
  has_participant: Schema.Boolean
})
const decodeConversation = Schema.decodeUnknown(Schema.Array(ConversationRow))

/**
 * Plans an activity as delivery would (RoutingRules.plan, the same code and the same cached rules) and
 * answers what would happen; nothing is stored or sent.
 */
export const dryRun = (credential: TenantCredential, body: DryRunBody) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rules = yield* RoutingRules
    const problems = new Problems()
    const idField = (field: "source_channel_id" | "conversation_id" | "origin_channel_id") => {
      const value = body[field]
      if (value === undefined) return undefined
      if (!isUuid(value)) problems.add(field, "must be a UUID")
      return value.toLowerCase()
    }
    const sourceSent = idField("source_channel_id")
    const conversationId = idField("conversation_id")
    const originSent = idField("origin_channel_id")
    if (conversationId === undefined && sourceSent === undefined) problems.add("source_channel_id", "is required without conversation_id")
    let at = new Date()
    if (body.at !== undefined) {
      const parsed = new Date(body.at)
      if (!ISO_8601.test(body.at) || Number.isNaN(parsed.getTime())) problems.add("at", "must be an ISO 8601 time")
      else at = parsed
    }
    yield* problems.check()
    const checked = yield* Either.match(checkActivity(body.activity), { onLeft: Effect.fail, onRight: Effect.succeed })

    let origin: string
    let metadata: Record<string, unknown>
    let participant: RoutingSubject["participant"]
    if (conversationId !== undefined) {
      const [row] = yield* sql`
        SELECT c.origin_channel_id::text, c.metadata, p.external_id, p.display_name,
               p.metadata AS participant_metadata, p.id IS NOT NULL AS has_participant
        FROM conversations c LEFT JOIN participants p ON p.id = c.participant_id
        WHERE c.tenant_id = ${credential.tenantId} AND c.id = ${conversationId}`.pipe(Effect.flatMap(decodeConversation))
      if (row === undefined) return yield* new NotFound({ message: `conversation ${conversationId} not found` })
      origin = row.origin_channel_id
      metadata = row.metadata
      participant = row.has_participant
        ? { external_id: row.external_id, display_name: row.display_name, metadata: row.participant_metadata ?? {} }
        : null
    } else {
      origin = originSent ?? sourceSent!
      metadata = body.conversation?.metadata ?? {}
      participant = body.participant === undefined
        ? null
        : {
          external_id: body.participant.external_id ?? null,
          display_name: body.participant.display_name ?? null,
          metadata: body.participant.metadata ?? {}
        }
    }
    const source = sourceSent ?? origin
    // Channels named must be the tenant's (404 like any foreign resource); a channel token reaches its own only.
    const named = [...new Set([source, origin])]
    const found = yield* sql<{ id: string }>`
      SELECT id::text FROM channels WHERE tenant_id = ${credential.tenantId} AND id = ANY(${named}::uuid[])`
    for (const id of named) {
      if (!found.some((row) => row.id === id) || (credential.channelId !== null && credential.channelId !== id && id === origin)) {
        return yield* new NotFound({ message: `channel ${id} not found` })
      }
    }
    const activity = {
      type: checked.type,
      sender: checked.sender,
      text: checked.text,
      attachments: checked.attachments,
      metadata: checked.metadata,
      reply_to_id: checked.reply_to_id,
      message_type: checked.message_type,
      payload: checked.payload,
      source_channel_id: source
    }
    const plan = yield* rules.plan(credential.tenantId, activity, { origin_channel_id: origin, metadata }, participant, at)
    return {
      direction: plan.direction,
      origin_channel_id: plan.origin_channel_id,
      source_channel_id: source,
      rule_source_channel_id: plan.rule_source_channel_id,
      at: at.toISOString(),
      activity,
      rules: plan.rules.map(({ result, rule, targets }) => ({
        id: rule.id,
        name: rule.name,
        priority: rule.priority,
        stop_processing: rule.stop_processing,
        result,
        conditions: rule.conditions,
        target_channel_ids: rule.target_channel_ids,
        transformations: rule.transformations,
        targets
      })),
      deliveries: plan.deliveries
    }
  }).pipe(orUnavailable)
