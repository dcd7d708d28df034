import { Effect, Schema, type Types } from "effect"
import {
  Backoff,
  type ChannelInput,
  ChannelMode,
  ChannelStatus,
  ChannelType,
  type JsonObject,
  MAX_TRANSFORMATIONS,
  RATE_LIMIT_BOUNDS,
  RETRY_POLICY_BOUNDS,
  type RetryPolicy,
  type Transformation
} from "../domain/Channel.js"
import { Problems, type Report } from "../domain/Problems.js"
import { restoreRedacted } from "../domain/Redaction.js"
import { validateTransformations } from "../routing/TransformationValidation.js"
import { validateConfig } from "./ChannelConfig.js"

/** The stored values a change is checked against (the defaults when creating). */
export interface ChannelBase {
  readonly type: ChannelType
  readonly require_signature: boolean
  /** The stored config, unredacted: `[REDACTED]` values sent back are restored from it. */
  readonly config: JsonObject
  readonly retry_policy: RetryPolicy
}

/** A validated change: only the fields to set. */
export interface ChannelPatch {
  name?: string
  type?: ChannelType
  mode?: ChannelMode
  status?: ChannelStatus
  require_signature?: boolean
  config?: JsonObject
  transformations?: ReadonlyArray<Transformation>
  retry_policy?: RetryPolicy
  rate_limit?: { readonly limit: number; readonly scale_ms: number } | null
}

const isType = Schema.is(ChannelType)
const isMode = Schema.is(ChannelMode)
const isStatus = Schema.is(ChannelStatus)
const isBackoff = Schema.is(Backoff)

const isIntegerIn = (value: number, min: number, max: number) => Number.isInteger(value) && value >= min && value <= max

/**
 * Reports problems of a nested field under their path (`config.url`, `transformations[0].type`) and
 * once under the top-level field, so clients that only look at top-level names still see them.
 */
const within = (problems: Problems, field: string, summary: string): Report => (path, message) => {
  if (path === "") {
    problems.add(field, message)
    return
  }
  if (!(problems.errors[field] ?? []).includes(summary)) problems.add(field, summary)
  problems.add(path.startsWith("[") ? `${field}${path}` : `${field}.${path}`, message)
}

const checkRetryPolicy = (sent: NonNullable<ChannelInput["retry_policy"]>, base: RetryPolicy, report: Report) => {
  // Sent keys replace the stored ones; the others are kept.
  const merged: Types.Mutable<RetryPolicy> = { ...base }
  for (const key of ["max_attempts", "base_ms", "max_ms", "timeout_ms"] as const) {
    const value = sent[key]
    if (value === undefined) continue
    const { max, min } = RETRY_POLICY_BOUNDS[key]
    if (isIntegerIn(value, min, max)) merged[key] = value
    else report(key, `must be an integer from ${min} to ${max}`)
  }
  if (sent.backoff !== undefined) {
    if (isBackoff(sent.backoff)) merged.backoff = sent.backoff
    else report("backoff", "must be exponential, linear or fixed")
  }
  if (merged.base_ms > merged.max_ms) report("base_ms", "must not exceed max_ms")
  return merged
}

const checkRateLimit = (sent: NonNullable<ChannelInput["rate_limit"]>, report: Report) => {
  const { limit, scale_ms } = sent
  if (limit === undefined) report("limit", "is required")
  else if (!isIntegerIn(limit, 1, RATE_LIMIT_BOUNDS.limit)) {
    report("limit", `must be an integer from 1 to ${RATE_LIMIT_BOUNDS.limit}`)
  }
  if (scale_ms === undefined) report("scale_ms", "is required")
  else if (!isIntegerIn(scale_ms, 1, RATE_LIMIT_BOUNDS.scale_ms)) {
    report("scale_ms", `must be an integer from 1 to ${RATE_LIMIT_BOUNDS.scale_ms}`)
  }
  return { limit: limit ?? 0, scale_ms: scale_ms ?? 0 }
}

/**
 * Checks every sent field against `base` (422 `validation_failed` listing every problem). A sent config
 * replaces the stored one, but its `[REDACTED]` values keep the stored value at their path.
 */
export const validateChannel = (input: ChannelInput, base: ChannelBase, creating: boolean) =>
  Effect.gen(function*() {
    const problems = new Problems()
    const patch: ChannelPatch = {}
    if (input.name !== undefined || creating) {
      const name = problems.requiredName("name", input.name)
      if (name !== undefined) patch.name = name
    }
    let typeKnown = true
    if (input.type !== undefined) {
      if (isType(input.type)) patch.type = input.type
      else {
        typeKnown = false
        problems.add("type", `must be one of ${ChannelType.literals.join(", ")}`)
      }
    }
    if (input.mode !== undefined) {
      if (isMode(input.mode)) patch.mode = input.mode
      else problems.add("mode", "must be inbound, outbound or duplex")
    }
    if (input.status !== undefined) {
      if (isStatus(input.status)) patch.status = input.status
      else problems.add("status", "must be active or inactive")
    }
    if (input.require_signature !== undefined) patch.require_signature = input.require_signature
    if (input.transformations !== undefined) {
      const report = within(problems, "transformations", "is invalid")
      if (input.transformations.length > MAX_TRANSFORMATIONS) {
        report("", `must have at most ${MAX_TRANSFORMATIONS} items`)
      }
      patch.transformations = validateTransformations(input.transformations, report)
    }
    if (input.retry_policy !== undefined) {
      patch.retry_policy = checkRetryPolicy(input.retry_policy, base.retry_policy, within(problems, "retry_policy", "is invalid"))
    }
    if (input.rate_limit !== undefined) {
      patch.rate_limit = input.rate_limit === null
        ? null
        : checkRateLimit(input.rate_limit, within(problems, "rate_limit", "is invalid"))
    }
    const type = patch.type ?? base.type
    const configAffected = creating || input.config !== undefined || input.require_signature !== undefined ||
      type !== base.type
    // With an unknown type there is nothing to check the config against; `type` is reported already.
    if (typeKnown && configAffected) {
      const report = within(problems, "config", `is not a valid ${type} configuration`)
      const config = input.config === undefined
        ? base.config
        : restoreRedacted(input.config, base.config, report)
      patch.config = yield* validateConfig(type, config, patch.require_signature ?? base.require_signature, report)
    }
    yield* problems.check()
    return patch
  })
