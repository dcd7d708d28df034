import type { ChannelMode } from "../domain/Channel.js"
import type { Transformation } from "../domain/Channel.js"
import { type Condition, evaluate, type RoutingSubject } from "./Conditions.js"
import { applyTransformations, type Transformable } from "./Transformations.js"

/** A rule as the planner sees it: its condition compiled (RoutingRules keeps these per tenant). */
export interface PlannedRule {
  readonly id: string
  readonly name: string
  readonly source_channel_id: string
  readonly target_channel_ids: ReadonlyArray<string>
  readonly enabled: boolean
  readonly priority: number
  readonly stop_processing: boolean
  /** As stored, for dry_run's answer. */
  readonly conditions: unknown
  readonly condition: Condition
  readonly transformations: ReadonlyArray<Transformation>
}

/** What the planner needs of a channel of the tenant. */
export interface PlannedChannel {
  readonly id: string
  readonly mode: ChannelMode
  readonly status: "active" | "inactive"
  readonly transformations: ReadonlyArray<Transformation>
}

/** The activity to plan: any shape that has what conditions and transformations read. */
export interface PlanActivity extends Transformable {
  readonly type: string
  readonly sender: string
  readonly message_type: string | null
  readonly source_channel_id: string | null
}

export interface PlanInput<A extends PlanActivity> {
  readonly activity: A
  readonly conversation: { readonly origin_channel_id: string; readonly metadata: Readonly<Record<string, unknown>> }
  readonly participant: RoutingSubject["participant"]
  readonly at: Date
  /** The tenant's rules (disabled ones are ignored). */
  readonly rules: ReadonlyArray<PlannedRule>
  /** The tenant's channels by id; a rule's target not among them is skipped. */
  readonly channels: ReadonlyMap<string, PlannedChannel>
}

/** How a rule fared: `skipped` when an earlier matching rule had `stop_processing`. */
export type RuleResult = "matched" | "not_matched" | "skipped"

/** Why a target of a matched rule gets no delivery, or `delivered`. */
export type TargetResult = "delivered" | "duplicate" | "source" | "unknown_channel" | "inactive" | "inbound_only"

export interface RuleOutcome {
  readonly rule: PlannedRule
  readonly result: RuleResult
  readonly targets: ReadonlyArray<{ readonly channel_id: string; readonly result: TargetResult }>
}

/** One delivery to make: the copy of the activity as that channel gets it. */
export interface PlannedDelivery<A> {
  readonly channel_id: string
  /** The rule that routed it; null for the delivery back to the origin channel. */
  readonly rule_id: string | null
  readonly activity: A
}

export interface Plan<A> {
  /**
   * `inbound`: the activity has no source channel or comes from the origin; it goes to the origin
   * (when it did not come from there) and to the targets of the origin's matching rules. `outbound`:
   * a reply from another channel; it goes back to the origin only.
   */
  readonly direction: "inbound" | "outbound"
  readonly origin_channel_id: string
  readonly source_channel_id: string | null
  /** The channel whose rules were evaluated; null in the outbound direction, where none are. */
  readonly rule_source_channel_id: string | null
  readonly rules: ReadonlyArray<RuleOutcome>
  readonly deliveries: ReadonlyArray<PlannedDelivery<A>>
}

/** Plans one activity against a tenant's rules and channels as read once (RoutingRules.planner). */
export type Planner = <A extends PlanActivity>(
  activity: A,
  conversation: PlanInput<A>["conversation"],
  participant: PlanInput<A>["participant"],
  at: Date
) => Plan<A>

/** Evaluation order: priority (lower first), then name and id so equal priorities plan the same everywhere. */
export const byPriority = (a: PlannedRule, b: PlannedRule) =>
  a.priority - b.priority || (a.name < b.name ? -1 : a.name > b.name ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0)

/** Why `channel` cannot take a delivery, or undefined when it can. */
const refusal = (channel: PlannedChannel | undefined): TargetResult | undefined =>
  channel === undefined
    ? "unknown_channel"
    : channel.status !== "active"
    ? "inactive"
    : channel.mode === "inbound"
    ? "inbound_only"
    : undefined

/**
 * Plans the deliveries of one activity (server-apis.md "Routing rules", docs/delivery/routing.md).
 * Routing is one hop: rules are evaluated only in the inbound direction, each channel gets at most one
 * copy, and the source channel none, so a routed copy answered from a target comes back as an
 * outbound reply that goes to the origin alone and is never routed again.
 */
export const planRouting = <A extends PlanActivity>(input: PlanInput<A>): Plan<A> => {
  const { activity, channels, conversation } = input
  const origin = conversation.origin_channel_id
  const source = activity.source_channel_id
  const inbound = source === null || source === origin
  const deliveries: Array<PlannedDelivery<A>> = []
  const seen = new Set<string>()
  if (source !== null) seen.add(source)
  const deliver = (channel: PlannedChannel, ruleId: string | null, steps: ReadonlyArray<Transformation>) => {
    seen.add(channel.id)
    deliveries.push({ channel_id: channel.id, rule_id: ruleId, activity: applyTransformations(activity, steps) })
  }
  const originChannel = channels.get(origin)
  if (!seen.has(origin) && originChannel !== undefined && refusal(originChannel) === undefined) {
    deliver(originChannel, null, originChannel.transformations)
  }
  if (!inbound) {
    return { direction: "outbound", origin_channel_id: origin, source_channel_id: source, rule_source_channel_id: null, rules: [], deliveries }
  }
  const subject: RoutingSubject = {
    activity: { type: activity.type, text: activity.text, sender: activity.sender, message_type: activity.message_type, metadata: activity.metadata },
    conversation: { metadata: conversation.metadata },
    participant: input.participant,
    at: input.at
  }
  const candidates = input.rules.filter((rule) => rule.enabled && rule.source_channel_id === origin).sort(byPriority)
  const outcomes: Array<RuleOutcome> = []
  let stopped = false
  for (const rule of candidates) {
    if (stopped) {
      outcomes.push({ rule, result: "skipped", targets: [] })
      continue
    }
    if (!evaluate(rule.condition, subject)) {
      outcomes.push({ rule, result: "not_matched", targets: [] })
      continue
    }
    const targets = rule.target_channel_ids.map((channelId) => {
      const channel = channels.get(channelId)
      const refused = channelId === source ? "source" : seen.has(channelId) ? "duplicate" : refusal(channel)
      if (refused !== undefined || channel === undefined) return { channel_id: channelId, result: refused ?? "unknown_channel" }
      // The target channel's own chain first, then the rule's (server-apis.md "Routing rule").
      deliver(channel, rule.id, [...channel.transformations, ...rule.transformations])
      return { channel_id: channelId, result: "delivered" as const }
    })
    outcomes.push({ rule, result: "matched", targets })
    stopped = rule.stop_processing
  }
  return { direction: "inbound", origin_channel_id: origin, source_channel_id: source, rule_source_channel_id: origin, rules: outcomes, deliveries }
}
