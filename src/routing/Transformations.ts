import type { Transformation } from "../domain/Channel.js"
import { MAX_REGEX_INPUT } from "./RegexScreen.js"

/** The parts of an activity a transformation may change; every other field is carried over. */
export interface Transformable {
  readonly text: string | null
  readonly metadata: Readonly<Record<string, unknown>>
}

/**
 * `text` cut to at most `maxBytes` bytes of UTF-8, never inside a character: a surrogate pair (one
 * 4-byte code point) is kept whole or dropped whole.
 */
export const truncateUtf8 = (text: string, maxBytes: number): string => {
  if (Buffer.byteLength(text, "utf8") <= maxBytes) return text
  let bytes = 0
  let end = 0
  for (const char of text) {
    const size = Buffer.byteLength(char, "utf8")
    if (bytes + size > maxBytes) break
    bytes += size
    end += char.length
  }
  return text.slice(0, end)
}

/**
 * Replaces every match of `pattern` (screened at save, RegexScreen) in `text`. The text is worked on
 * in slices of `MAX_REGEX_INPUT` characters, so a pattern runs on bounded input whatever the text's
 * length; a match that would straddle two slices is not redacted.
 */
const redact = (text: string, pattern: string, replacement: string): string => {
  let re: RegExp
  try {
    re = new RegExp(pattern, "g")
  } catch {
    // Checked at save: a stored pattern always compiles; nothing to redact with otherwise.
    return text
  }
  let out = ""
  let start = 0
  while (start < text.length) {
    // Never split a surrogate pair between two slices.
    let end = Math.min(start + MAX_REGEX_INPUT, text.length)
    if (end < text.length && /[\uD800-\uDBFF]/.test(text[end - 1]!)) end -= 1
    out += text.slice(start, end).replace(re, () => replacement)
    start = end
  }
  return out
}

/**
 * The steps of a chain (validated at save, TransformationValidation) applied in order to a copy of
 * `activity`; the original is untouched. A step whose parameters are not as validated is skipped.
 */
export const applyTransformations = <A extends Transformable>(activity: A, steps: ReadonlyArray<Transformation>): A => {
  // Nothing is ever changed in place: with no steps the activity is its own copy (the common case on appends).
  if (steps.length === 0) return activity
  let text = activity.text
  let metadata: Record<string, unknown> = { ...activity.metadata }
  for (const step of steps) {
    switch (step.type) {
      case "set_metadata":
        if (typeof step["key"] === "string") metadata = { ...metadata, [step["key"]]: step["value"] ?? null }
        break
      case "remove_metadata":
        if (typeof step["key"] === "string") {
          const { [step["key"]]: _removed, ...rest } = metadata
          metadata = rest
        }
        break
      case "prefix_text":
        if (typeof step["value"] === "string") text = step["value"] + (text ?? "")
        break
      case "truncate_text":
        if (text !== null && typeof step["max_bytes"] === "number") text = truncateUtf8(text, step["max_bytes"])
        break
      case "redact_text":
        if (text !== null && typeof step["pattern"] === "string" && typeof step["replacement"] === "string") {
          text = redact(text, step["pattern"], step["replacement"])
        }
        break
    }
  }
  return { ...activity, text, metadata }
}
