import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import { BadRequest, InsufficientScope, InvalidMessage, NotFound, Unavailable, ValidationFailed } from "../domain/ApiError.js"
import { DryRunBody } from "../routing/DryRun.js"
import { RoutingRule, RoutingRuleId, RoutingRuleInput } from "../routing/RoutingRule.js"
import { envelope } from "./ErrorEnvelope.js"
import { TenantAuth } from "./TenantAuth.js"

/** `/routing_rules/:id`; a malformed id is 400. */
const RulePath = Schema.Struct({ id: RoutingRuleId })
/** Create and update bodies are wrapped; a body without `routing_rule` is 400. */
const RuleBody = Schema.Struct({ routing_rule: RoutingRuleInput })
const RuleData = Schema.Struct({ data: RoutingRule })

const TargetOutcome = Schema.Struct({ channel_id: Schema.String, result: Schema.String })
const DryRunAnswer = Schema.Struct({
  data: Schema.Struct({
    direction: Schema.Literal("inbound", "outbound"),
    origin_channel_id: Schema.String,
    source_channel_id: Schema.String,
    rule_source_channel_id: Schema.NullOr(Schema.String),
    at: Schema.String,
    activity: Schema.Unknown,
    rules: Schema.Array(Schema.Struct({
      id: Schema.String,
      name: Schema.String,
      priority: Schema.Int,
      stop_processing: Schema.Boolean,
      result: Schema.Literal("matched", "not_matched", "skipped"),
      conditions: Schema.Unknown,
      target_channel_ids: Schema.Array(Schema.String),
      transformations: Schema.Array(Schema.Unknown),
      targets: Schema.Array(TargetOutcome)
    })),
    deliveries: Schema.Array(Schema.Struct({
      channel_id: Schema.String,
      rule_id: Schema.NullOr(Schema.String),
      activity: Schema.Unknown
    }))
  })
})

const update = <const Name extends string>(endpoint: HttpApiEndpoint.HttpApiEndpoint<Name, "PUT" | "PATCH">) =>
  endpoint.setPath(RulePath).setPayload(RuleBody).addSuccess(RuleData)

/** A tenant's routing rules (`/api/v1/routing_rules`), server-apis.md "Routing rules"; `x-api-key` or `x-channel-token`. */
export class RoutingRulesApi extends HttpApiGroup.make("routingRules")
  .add(HttpApiEndpoint.get("listRoutingRules", "/routing_rules").addSuccess(Schema.Struct({ data: Schema.Array(RoutingRule) })))
  .add(HttpApiEndpoint.post("createRoutingRule", "/routing_rules").setPayload(RuleBody).addSuccess(RuleData, { status: 201 }))
  .add(HttpApiEndpoint.post("dryRunRoutingRules", "/routing_rules/dry_run").setPayload(DryRunBody).addSuccess(DryRunAnswer))
  .add(HttpApiEndpoint.get("getRoutingRule", "/routing_rules/:id").setPath(RulePath).addSuccess(RuleData))
  .add(update(HttpApiEndpoint.put("putRoutingRule", "/routing_rules/:id")))
  .add(update(HttpApiEndpoint.patch("patchRoutingRule", "/routing_rules/:id")))
  .add(HttpApiEndpoint.del("deleteRoutingRule", "/routing_rules/:id").setPath(RulePath).addSuccess(HttpApiSchema.NoContent))
  .addError(envelope(NotFound))
  .addError(envelope(BadRequest))
  .addError(envelope(ValidationFailed))
  .addError(envelope(InvalidMessage))
  .addError(envelope(InsufficientScope))
  .addError(envelope(Unavailable))
  .middleware(TenantAuth)
  .prefix("/api/v1")
{}
