import { isDeepStrictEqual } from "node:util"
import { Either } from "effect"
import { fieldPath, type Report } from "../domain/Problems.js"
import { boundedTest, compilePattern } from "./RegexScreen.js"

/** The ops of a predicate (CONTRACT.md §8). */
export const OPS = ["eq", "neq", "in", "not_in", "contains", "starts_with", "ends_with", "regex", "exists", "gt", "gte", "lt", "lte"] as const
export type Op = typeof OPS[number]

/** Fields named exactly (CONTRACT.md §8). */
const PLAIN_FIELDS = [
  "activity.type",
  "activity.text",
  "activity.sender",
  "activity.message_type",
  "participant.external_id",
  "participant.display_name",
  "time.hour",
  "time.weekday",
  "time.date"
] as const
/** Fields followed by a dotted path into a metadata object. */
const METADATA_FIELDS = ["activity.metadata", "conversation.metadata", "participant.metadata"] as const

/** Bounds that keep a stored condition, and its evaluation per activity, small. */
export const CONDITION_BOUNDS = { depth: 8, nodes: 100, listItems: 100, pathSegments: 10 } as const

/** A checked condition, its regexes compiled; what the planner evaluates. */
export type Condition =
  | { readonly kind: "all"; readonly items: ReadonlyArray<Condition> }
  | { readonly kind: "any"; readonly items: ReadonlyArray<Condition> }
  | { readonly kind: "not"; readonly item: Condition }
  | {
    readonly kind: "predicate"
    readonly field: ReadonlyArray<string>
    readonly op: Op
    readonly value: unknown
    readonly regex: RegExp | undefined
  }

/** What a condition is evaluated against: one activity at one time. */
export interface RoutingSubject {
  readonly activity: {
    readonly type: string
    readonly text: string | null
    readonly sender: string
    readonly message_type: string | null
    readonly metadata: Readonly<Record<string, unknown>>
  }
  readonly conversation: { readonly metadata: Readonly<Record<string, unknown>> }
  readonly participant: {
    readonly external_id: string | null
    readonly display_name: string | null
    readonly metadata: Readonly<Record<string, unknown>>
  } | null
  readonly at: Date
}

const MATCH_ALL: Condition = { kind: "all", items: [] }

const isObject = (u: unknown): u is Record<string, unknown> => typeof u === "object" && u !== null && !Array.isArray(u)
const isOp = (u: unknown): u is Op => typeof u === "string" && (OPS as ReadonlyArray<string>).includes(u)

/** The field's path segments, or a message: a named field or `<object>.metadata.<path>`. */
const parseField = (field: unknown): Either.Either<ReadonlyArray<string>, string> => {
  if (typeof field !== "string") return Either.left("must be a string")
  if ((PLAIN_FIELDS as ReadonlyArray<string>).includes(field)) return Either.right(field.split("."))
  for (const prefix of METADATA_FIELDS) {
    if (!field.startsWith(`${prefix}.`)) continue
    const path = field.slice(prefix.length + 1).split(".")
    if (path.some((segment) => segment === "")) return Either.left(`must name a key after ${prefix}.`)
    if (path.length > CONDITION_BOUNDS.pathSegments) {
      return Either.left(`must have at most ${CONDITION_BOUNDS.pathSegments} keys after ${prefix}`)
    }
    return Either.right([...prefix.split("."), ...path])
  }
  return Either.left(`must be one of ${PLAIN_FIELDS.join(", ")} or ${METADATA_FIELDS.map((f) => `${f}.<path>`).join(", ")}`)
}

/** What is wrong with a predicate's value for its op; undefined when fine. */
const checkValue = (op: Op, value: unknown, present: boolean): string | undefined => {
  switch (op) {
    case "exists":
      return !present || typeof value === "boolean" ? undefined : "must be a boolean"
    case "in":
    case "not_in":
      if (!Array.isArray(value)) return "must be an array"
      return value.length > CONDITION_BOUNDS.listItems ? `must have at most ${CONDITION_BOUNDS.listItems} items` : undefined
    case "starts_with":
    case "ends_with":
      return typeof value === "string" ? undefined : "must be a string"
    case "gt":
    case "gte":
    case "lt":
    case "lte":
      return typeof value === "number" || typeof value === "string" ? undefined : "must be a number or a string"
    default:
      return present ? undefined : "is required"
  }
}

/**
 * Checks a condition as sent (a predicate, a group `all` / `any` / `not`, an array for `all`, `{}` for
 * everything) and compiles it; every problem is reported at its path under `path`
 * (`conditions.all[1].op`).
 */
export const compileCondition = (input: unknown, report: Report, path = "conditions"): Condition => {
  let nodes = 0
  const walk = (node: unknown, at: string, depth: number): Condition => {
    nodes += 1
    if (nodes > CONDITION_BOUNDS.nodes) {
      if (nodes === CONDITION_BOUNDS.nodes + 1) report(at, `a condition may have at most ${CONDITION_BOUNDS.nodes} parts`)
      return MATCH_ALL
    }
    if (depth > CONDITION_BOUNDS.depth) {
      report(at, `must nest at most ${CONDITION_BOUNDS.depth} levels`)
      return MATCH_ALL
    }
    const list = (items: unknown, listPath: string): ReadonlyArray<Condition> => {
      if (!Array.isArray(items)) {
        report(listPath, "must be an array")
        return []
      }
      return items.map((item, i) => walk(item, fieldPath(listPath, i), depth + 1))
    }
    if (Array.isArray(node)) return { kind: "all", items: list(node, at) }
    if (!isObject(node)) {
      report(at, "must be an object or an array")
      return MATCH_ALL
    }
    const groups = (["all", "any", "not"] as const).filter((key) => key in node)
    if ("field" in node || "op" in node) {
      if (groups.length > 0) report(at, "must be either a predicate or a group, not both")
      return predicate(node, at)
    }
    if (groups.length > 1) {
      report(at, "must have only one of all, any, not")
      return MATCH_ALL
    }
    const unknown = Object.keys(node).filter((key) => !(groups as ReadonlyArray<string>).includes(key))
    for (const key of unknown) report(fieldPath(at, key), "is not a condition key (field, op, value, all, any, not)")
    const group = groups[0]
    if (group === undefined) return MATCH_ALL
    const groupPath = fieldPath(at, group)
    if (group === "not") return { kind: "not", item: walk(node[group], groupPath, depth + 1) }
    return { kind: group, items: list(node[group], groupPath) }
  }
  const predicate = (node: Record<string, unknown>, at: string): Condition => {
    const field = parseField(node["field"])
    if (Either.isLeft(field)) report(fieldPath(at, "field"), "field" in node ? field.left : "is required")
    const op = node["op"]
    if (!isOp(op)) {
      report(fieldPath(at, "op"), "op" in node ? `must be one of ${OPS.join(", ")}` : "is required")
      return MATCH_ALL
    }
    for (const key of Object.keys(node)) {
      if (key !== "field" && key !== "op" && key !== "value") report(fieldPath(at, key), "is not a predicate key (field, op, value)")
    }
    const present = "value" in node
    const value = op === "exists" && !present ? true : node["value"]
    const problem = checkValue(op, value, present)
    if (problem !== undefined) report(fieldPath(at, "value"), problem)
    let regex: RegExp | undefined
    if (op === "regex") {
      const compiled = compilePattern(value)
      if (Either.isLeft(compiled)) {
        if (problem === undefined) report(fieldPath(at, "value"), compiled.left)
      } else regex = compiled.right
    }
    return Either.isLeft(field) ? MATCH_ALL : { kind: "predicate", field: field.right, op, value, regex }
  }
  return walk(input, path, 0)
}

/** A stored condition compiled; a stored one that no longer passes the checks never matches. */
export const compileStored = (stored: unknown): Condition => {
  let valid = true
  const condition = compileCondition(stored, () => {
    valid = false
  })
  return valid ? condition : { kind: "any", items: [] }
}

const dig = (root: unknown, path: ReadonlyArray<string>): unknown => {
  let value = root
  for (const key of path) {
    if (!isObject(value) || !Object.hasOwn(value, key)) return undefined
    value = value[key]
  }
  return value
}

/** The value a field names for `subject`; undefined when absent. */
const resolve = (subject: RoutingSubject, field: ReadonlyArray<string>): unknown => {
  const [root, name, ...rest] = field
  switch (root) {
    case "activity":
      return name === "metadata" ? dig(subject.activity.metadata, rest) : dig(subject.activity, [name!])
    case "conversation":
      return dig(subject.conversation.metadata, rest)
    case "participant":
      if (subject.participant === null) return undefined
      return name === "metadata" ? dig(subject.participant.metadata, rest) : dig(subject.participant, [name!])
    case "time": {
      const at = subject.at
      if (name === "hour") return at.getUTCHours()
      // getUTCDay is 0 for Sunday; CONTRACT.md counts 1 Monday to 7 Sunday.
      if (name === "weekday") return at.getUTCDay() === 0 ? 7 : at.getUTCDay()
      return at.toISOString().slice(0, 10)
    }
    default:
      return undefined
  }
}

const same = (a: unknown, b: unknown) => a === b || (typeof a === "object" && typeof b === "object" && isDeepStrictEqual(a, b))

/** Numbers with numbers, strings with strings (dates, `YYYY-MM-DD`, compare as text); else undefined. */
const compare = (a: unknown, b: unknown): number | undefined =>
  (typeof a === "number" && typeof b === "number") || (typeof a === "string" && typeof b === "string")
    ? a < b ? -1 : a > b ? 1 : 0
    : undefined

const holds = (op: Op, actual: unknown, expected: unknown, regex: RegExp | undefined): boolean => {
  switch (op) {
    case "eq":
      return actual !== undefined && same(actual, expected)
    case "neq":
      return !(actual !== undefined && same(actual, expected))
    case "in":
      return actual !== undefined && Array.isArray(expected) && expected.some((item) => same(actual, item))
    case "not_in":
      return !(actual !== undefined && Array.isArray(expected) && expected.some((item) => same(actual, item)))
    case "contains":
      if (typeof actual === "string") return typeof expected === "string" && actual.includes(expected)
      return Array.isArray(actual) && actual.some((item) => same(item, expected))
    case "starts_with":
      return typeof actual === "string" && typeof expected === "string" && actual.startsWith(expected)
    case "ends_with":
      return typeof actual === "string" && typeof expected === "string" && actual.endsWith(expected)
    case "regex":
      return typeof actual === "string" && regex !== undefined && boundedTest(regex, actual)
    case "exists":
      return (actual !== undefined && actual !== null) === expected
    case "gt":
      return (compare(actual, expected) ?? 0) > 0
    case "gte": {
      const c = compare(actual, expected)
      return c !== undefined && c >= 0
    }
    case "lt":
      return (compare(actual, expected) ?? 0) < 0
    case "lte": {
      const c = compare(actual, expected)
      return c !== undefined && c <= 0
    }
  }
}

/** Whether `condition` holds for `subject`; an empty `all` holds, an empty `any` does not. */
export const evaluate = (condition: Condition, subject: RoutingSubject): boolean => {
  switch (condition.kind) {
    case "all":
      return condition.items.every((item) => evaluate(item, subject))
    case "any":
      return condition.items.some((item) => evaluate(item, subject))
    case "not":
      return !evaluate(condition.item, subject)
    case "predicate":
      return holds(condition.op, resolve(subject, condition.field), condition.value, condition.regex)
  }
}
