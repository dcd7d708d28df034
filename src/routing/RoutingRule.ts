import { Schema } from "effect"
import { Transformation } from "../domain/Channel.js"
import { TenantId } from "../domain/Tenant.js"
import { LowerCaseUuid } from "../domain/Uuid.js"

export const RoutingRuleId = LowerCaseUuid("RoutingRuleId")
export type RoutingRuleId = typeof RoutingRuleId.Type

/** Bounds of server-apis.md "Routing rule" and "Limits". */
export const RULE_BOUNDS = { minTargets: 1, maxTargets: 20, minPriority: -1_000_000, maxPriority: 1_000_000 } as const

/** A routing rule as the tenant API shows it; timestamps to the second. */
export const RoutingRule = Schema.Struct({
  id: Schema.String,
  tenant_id: TenantId,
  name: Schema.String,
  source_channel_id: Schema.String,
  target_channel_ids: Schema.Array(Schema.String),
  enabled: Schema.Boolean,
  conditions: Schema.Unknown,
  transformations: Schema.Array(Transformation),
  priority: Schema.Int,
  stop_processing: Schema.Boolean,
  inserted_at: Schema.String,
  updated_at: Schema.String
}).annotations({ identifier: "RoutingRule" })
export type RoutingRule = typeof RoutingRule.Type

/** A field taken as any JSON so `checkRuleFields` reports a wrong type as 422; the document still shows the type. */
const sent = (jsonSchema: object) => Schema.optional(Schema.Unknown.annotations({ jsonSchema }))

/**
 * What a client may send inside `{routing_rule: …}`: only the wrapper is checked here (400); types,
 * values, ranges and references by `checkRuleFields` and the service (422 per field). Unknown fields are dropped.
 */
export const RoutingRuleInput = Schema.Struct({
  name: sent({ type: "string" }),
  source_channel_id: sent({ type: "string", format: "uuid" }),
  target_channel_ids: sent({ type: "array", items: { type: "string", format: "uuid" } }),
  enabled: sent({ type: "boolean" }),
  conditions: Schema.optional(Schema.Unknown),
  transformations: sent({ type: "array", items: { type: "object", required: ["type"], properties: { type: { type: "string" } } } }),
  priority: sent({ type: "integer" }),
  stop_processing: sent({ type: "boolean" })
})
export type RoutingRuleInput = typeof RoutingRuleInput.Type

/** The writable fields of a rule, all set: a new rule with defaults, or a stored one with a change merged in. */
export interface RuleFields {
  readonly name: string
  readonly source_channel_id: string
  readonly target_channel_ids: ReadonlyArray<string>
  readonly enabled: boolean
  readonly conditions: unknown
  readonly transformations: ReadonlyArray<Transformation>
  readonly priority: number
  readonly stop_processing: boolean
}
