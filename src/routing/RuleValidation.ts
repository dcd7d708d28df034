import type { Transformation } from "../domain/Channel.js"
import { MAX_TRANSFORMATIONS } from "../domain/Channel.js"
import { Problems, type Report } from "../domain/Problems.js"
import { isUuid } from "../domain/Uuid.js"
import { compileCondition } from "./Conditions.js"
import { RULE_BOUNDS, type RoutingRuleInput, type RuleFields } from "./RoutingRule.js"
import { validateTransformations } from "./TransformationValidation.js"

/**
 * Reports a nested problem under the top-level field with its path in the message
 * (`conditions: conditions.all[1].op must be one of …`), as server-apis.md keys details by field.
 */
const under = (problems: Problems, field: string): Report => (path, message) =>
  problems.add(field, path === "" || path === field ? message : `${path.startsWith("[") ? field + path : path}: ${message}`)

/** A boolean field: the sent value, else the base's, else `fallback`; a non-boolean is reported. */
const booleanField = (problems: Problems, field: string, value: unknown, base: boolean | undefined, fallback: boolean) => {
  if (value === undefined) return base ?? fallback
  if (typeof value === "boolean") return value
  problems.add(field, "must be a boolean")
  return fallback
}

/**
 * Checks what needs no database (server-apis.md "Routing rules"): sent fields merged over `base`
 * (the stored rule, or the defaults when creating), JSON types included, so a wrong type is a 422 on
 * its field like any other problem. Every problem lands in `problems`; the returned fields are
 * meaningful only when there is none.
 */
export const checkRuleFields = (input: RoutingRuleInput, base: Partial<RuleFields>, problems: Problems): RuleFields => {
  const creating = base.name === undefined
  let name = base.name ?? ""
  if (input.name !== undefined || creating) {
    if (input.name !== undefined && typeof input.name !== "string") problems.add("name", "must be a string")
    else name = problems.requiredName("name", input.name) ?? name
  }
  let source = base.source_channel_id ?? ""
  if (input.source_channel_id !== undefined || creating) {
    const sent = input.source_channel_id
    if (sent === undefined || sent === "") problems.add("source_channel_id", "is required")
    else if (typeof sent !== "string" || !isUuid(sent)) problems.add("source_channel_id", "must be a UUID")
    else source = sent.toLowerCase()
  }
  let targets = base.target_channel_ids ?? []
  if (input.target_channel_ids !== undefined || creating) {
    const sent = input.target_channel_ids
    if (sent === undefined) problems.add("target_channel_ids", "is required")
    else if (!Array.isArray(sent) || !sent.every((id): id is string => typeof id === "string" && isUuid(id))) {
      problems.add("target_channel_ids", "must be an array of UUIDs")
    } else if (sent.length < RULE_BOUNDS.minTargets || sent.length > RULE_BOUNDS.maxTargets) {
      problems.add("target_channel_ids", `must have ${RULE_BOUNDS.minTargets} to ${RULE_BOUNDS.maxTargets} channels`)
    } else {
      targets = sent.map((id) => id.toLowerCase())
      if (new Set(targets).size !== targets.length) problems.add("target_channel_ids", "must not name a channel twice")
    }
  }
  if (source !== "" && targets.includes(source)) problems.add("target_channel_ids", "must not include the source channel")
  let priority = base.priority ?? 100
  if (input.priority !== undefined) {
    const p = input.priority
    if (typeof p !== "number" || !Number.isInteger(p) || p < RULE_BOUNDS.minPriority || p > RULE_BOUNDS.maxPriority) {
      problems.add("priority", `must be an integer from ${RULE_BOUNDS.minPriority} to ${RULE_BOUNDS.maxPriority}`)
    } else priority = p
  }
  let conditions: unknown = base.conditions ?? {}
  if (input.conditions !== undefined) {
    compileCondition(input.conditions, under(problems, "conditions"))
    conditions = input.conditions
  }
  let transformations: ReadonlyArray<Transformation> = base.transformations ?? []
  if (input.transformations !== undefined) {
    const report = under(problems, "transformations")
    if (!Array.isArray(input.transformations)) report("", "must be an array")
    else {
      if (input.transformations.length > MAX_TRANSFORMATIONS) report("", `must have at most ${MAX_TRANSFORMATIONS} items`)
      transformations = validateTransformations(input.transformations, report)
    }
  }
  return {
    name,
    source_channel_id: source,
    target_channel_ids: targets,
    enabled: booleanField(problems, "enabled", input.enabled, base.enabled, true),
    conditions,
    transformations,
    priority,
    stop_processing: booleanField(problems, "stop_processing", input.stop_processing, base.stop_processing, false)
  }
}

/**
 * Whether adding the edges `source → targets` to `edges` (the other enabled rules) closes a cycle:
 * a walk from the targets that comes back to the source. Linear in the rules.
 */
export const closesCycle = (
  edges: ReadonlyArray<{ readonly source: string; readonly targets: ReadonlyArray<string> }>,
  source: string,
  targets: ReadonlyArray<string>
): boolean => {
  const next = new Map<string, Array<string>>()
  for (const edge of edges) {
    const list = next.get(edge.source) ?? []
    list.push(...edge.targets)
    next.set(edge.source, list)
  }
  const seen = new Set<string>()
  const stack = [...targets]
  while (stack.length > 0) {
    const node = stack.pop()!
    if (node === source) return true
    if (seen.has(node)) continue
    seen.add(node)
    stack.push(...(next.get(node) ?? []))
  }
  return false
}
