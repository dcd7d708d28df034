import { Effect } from "effect"
import { query } from "./TestDatabase.js"
import { manage } from "./TestNode.js"

/** A delivery row made directly (the delivery loop has its own tests); returns its id. */
export const insertDelivery = (
  ids: { readonly tenantId: string; readonly channelId: string; readonly conversationId: string },
  fields: {
    readonly status?: string
    readonly insertedAt?: string
    readonly activityId?: string
    readonly payload?: object
    readonly attempts?: number
    readonly lastError?: string | null
    readonly providerMessageId?: string | null
  } = {}
) =>
  Effect.gen(function*() {
    const id = crypto.randomUUID()
    const activityId = fields.activityId ?? crypto.randomUUID()
    yield* query(
      `INSERT INTO deliveries (id, tenant_id, activity_id, conversation_id, channel_id, status, attempts, last_error,
                               provider_message_id, payload, inserted_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, coalesce($11::timestamptz, now()), coalesce($11::timestamptz, now()))`,
      [
        id,
        ids.tenantId,
        activityId,
        ids.conversationId,
        ids.channelId,
        fields.status ?? "pending",
        fields.attempts ?? 0,
        fields.lastError ?? null,
        fields.providerMessageId ?? null,
        JSON.stringify(fields.payload ?? { id: activityId, type: "message", text: "hello" }),
        fields.insertedAt ?? null
      ]
    )
    return id
  })

/** A scoped API key of the tenant with exactly these scopes. */
export const scopedKey = (primaryKey: string, scopes: ReadonlyArray<string>) =>
  Effect.map(manage(primaryKey, "POST", "/api_keys", { api_key: { name: `k-${scopes.join("-")}`, scopes } }), (reply) => {
    if (reply.status !== 201) throw new Error(`key create failed: ${reply.status} ${JSON.stringify(reply.body)}`)
    return reply.body.data.key as string
  })

/** A delivery row as stored, for checks. */
export const storedDelivery = (id: string) =>
  Effect.map(query<Record<string, any>>("SELECT * FROM deliveries WHERE id = $1", [id]), (rows) => rows[0]!)
