import { Effect } from "effect"
import { createHash } from "node:crypto"
import { query } from "./TestDatabase.js"
import { request } from "./TestNode.js"

/** A management API call with the given key. */
export const manage = (key: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  request(method, `/api/v1/manage${path}`, {
    ...(body === undefined ? {} : { body }),
    headers: { "x-api-key": key, ...headers }
  })

/** A webhook target the test node accepts (WEBHOOK_ALLOWED_HOSTS=127.0.0.1) and that nobody serves. */
export const HOOK_URL = "http://127.0.0.1:9/hook"

/** Creates a channel (a webhook to `HOOK_URL` unless `fields` say otherwise); anything but 201 fails the test. */
export const createChannel = (key: string, fields: Record<string, unknown> = {}) =>
  Effect.map(
    manage(key, "POST", "/channels", {
      channel: { name: `channel-${crypto.randomUUID().slice(0, 8)}`, config: { url: HOOK_URL }, ...fields }
    }),
    (reply) => {
      if (reply.status !== 201) throw new Error(`channel create failed: ${reply.status} ${JSON.stringify(reply.body)}`)
      return reply.body.data as { id: string; secret: string; [key: string]: any }
    }
  )

/** A timestamp as the APIs write it: ISO 8601 UTC with microseconds. */
export const ISO_MICROS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/

/** SHA-256 of a credential, as hex: what the database must hold instead of the credential. */
export const sha256Hex = (text: string) => createHash("sha256").update(text).digest("hex")

/** How many channels and channel-related audit rows a tenant has: to prove a rejected request stored nothing. */
export const storedCounts = (tenantId: string) =>
  query<{ channels: number; keys: number; audits: number }>(
    `SELECT (SELECT count(*)::int FROM channels WHERE tenant_id = $1) AS channels,
            (SELECT count(*)::int FROM publishable_keys WHERE tenant_id = $1) AS keys,
            (SELECT count(*)::int FROM audit_log WHERE tenant_id = $1) AS audits`,
    [tenantId]
  ).pipe(Effect.map((rows) => rows[0]!))
