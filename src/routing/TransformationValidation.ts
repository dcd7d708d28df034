import { Either, Option, Schema } from "effect"
import { Limits } from "../conversations/ActivityRules.js"
import { Transformation, TransformationType } from "../domain/Channel.js"
import type { Report } from "../domain/Problems.js"
import { compilePattern } from "./RegexScreen.js"

/** What is wrong with a parameter's value; undefined when it is fine. */
type Check = (value: unknown) => string | undefined

const isTransformationType = Schema.is(TransformationType)
// Channel bodies arrive decoded as `Transformation`; rule bodies arrive as any JSON.
const isStep = Schema.is(Transformation)

const anyJson: Check = () => undefined

const text: Check = (value) => (typeof value === "string" ? undefined : "must be a string")

const nonEmptyText: Check = (value) => text(value) ?? (value === "" ? "must not be empty" : undefined)

const integerFrom1To = (max: number): Check => (value) =>
  typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= max
    ? undefined
    : `must be an integer from 1 to ${max}`

// Screened as regex conditions are (RegexScreen): length, compilation, catastrophic backtracking.
const regexPattern: Check = (value) => Option.getOrUndefined(Either.getLeft(compilePattern(value, "g")))

/** The parameters of each middleware (CONTRACT.md §8): all required; any other key is dropped. */
const PARAMETERS: { readonly [T in TransformationType]: Readonly<Record<string, Check>> } = {
  set_metadata: { key: nonEmptyText, value: anyJson },
  remove_metadata: { key: nonEmptyText },
  prefix_text: { value: text },
  truncate_text: { max_bytes: integerFrom1To(Limits.text) },
  redact_text: { pattern: regexPattern, replacement: text }
}

/**
 * Checks that a step is an object with a string `type`, then its `type` (CONTRACT.md §8) and then
 * its parameters; returns the step as stored, with its known parameters only.
 */
const validateTransformation = (step: unknown, report: Report): Transformation => {
  if (!isStep(step)) {
    report("", "must be an object with a string type")
    return { type: "" }
  }
  if (step.type.trim() === "") {
    report("type", "must not be empty")
    return step
  }
  if (!isTransformationType(step.type)) {
    report("type", `must be one of ${TransformationType.literals.join(", ")}`)
    return step
  }
  const stored: Record<string, unknown> = {}
  for (const [name, check] of Object.entries(PARAMETERS[step.type])) {
    const value = step[name]
    // A JSON body has no undefined: absent means not sent (a null `value` is sent).
    const problem = value === undefined ? "is required" : check(value)
    if (problem === undefined) stored[name] = value
    else report(name, problem)
  }
  return { type: step.type, ...stored }
}

/** `validateTransformation` on every step of a chain, reporting under `[i].type`, `[i].max_bytes`, … */
export const validateTransformations = (
  steps: ReadonlyArray<unknown>,
  report: Report
): Array<Transformation> =>
  steps.map((step, i) =>
    validateTransformation(step, (path, message) => report(path === "" ? `[${i}]` : `[${i}].${path}`, message))
  )
