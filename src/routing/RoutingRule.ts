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

/**
 * What a client may send inside `{routing_rule: …}`. JSON types are checked here (400); values,
 * ranges and references by `validateRule` and the service (422 per field). Unknown fields are dropped.
 */
export const RoutingRuleInput = Schema.Struct({
  name: Schema.optional(Schema.String),
  source_channel_id: Schema.optional(Schema.String),
  target_channel_ids: Schema.optional(Schema.Array(Schema.String)),
  enabled: Schema.optional(Schema.Boolean),
  conditions: Schema.optional(Schema.Unknown),
  transformations: Schema.optional(Schema.Array(Transformation)),
  priority: Schema.optional(Schema.Number),
  stop_processing: Schema.optional(Schema.Boolean)
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
