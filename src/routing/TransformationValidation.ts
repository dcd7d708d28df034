import { Either, Schema } from "effect"
import { Limits } from "../conversations/ActivityRules.js"
import { type Transformation, TransformationType } from "../domain/Channel.js"
import type { Report } from "../domain/Problems.js"

/** The longest `redact_text` pattern in UTF-8 bytes, as CONTRACT.md §8 limits regex conditions. */
const MAX_PATTERN_BYTES = 256

/** What is wrong with a parameter's value; undefined when it is fine. */
type Check = (value: unknown) => string | undefined

const isTransformationType = Schema.is(TransformationType)

const anyJson: Check = () => undefined

const text: Check = (value) => (typeof value === "string" ? undefined : "must be a string")

const nonEmptyText: Check = (value) => text(value) ?? (value === "" ? "must not be empty" : undefined)

const integerFrom1To = (max: number): Check => (value) =>
  typeof value === "number" && Number.isInteger(value) && value >= 1 && value <= max
    ? undefined
    : `must be an integer from 1 to ${max}`

const regexPattern: Check = (value) => {
  const problem = nonEmptyText(value)
  if (problem !== undefined || typeof value !== "string") return problem
  if (Buffer.byteLength(value, "utf8") > MAX_PATTERN_BYTES) return `must be at most ${MAX_PATTERN_BYTES} bytes of UTF-8`
  // The RegExp constructor throws a SyntaxError on a pattern that does not compile.
  const compiled = Either.try({
    try: () => new RegExp(value),
    catch: (error) => (error instanceof Error ? error.message : String(error))
  })
  return Either.isLeft(compiled) ? `must be a valid regular expression (${compiled.left})` : undefined
}

/** The parameters of each middleware (CONTRACT.md §8): all required; any other key is dropped. */
const PARAMETERS: { readonly [T in TransformationType]: Readonly<Record<string, Check>> } = {
  set_metadata: { key: nonEmptyText, value: anyJson },
  remove_metadata: { key: nonEmptyText },
  prefix_text: { value: text },
  truncate_text: { max_bytes: integerFrom1To(Limits.text) },
  redact_text: { pattern: regexPattern, replacement: text }
}

/**
 * Checks one step's `type` (CONTRACT.md §8) and then its parameters; returns the step as stored, with
 * its known parameters only.
 */
const validateTransformation = (step: Transformation, report: Report): Transformation => {
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
  steps: ReadonlyArray<Transformation>,
  report: Report
): Array<Transformation> =>
  steps.map((step, i) =>
    validateTransformation(step, (path, message) => report(path === "" ? `[${i}]` : `[${i}].${path}`, message))
  )
