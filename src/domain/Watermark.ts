import { Data, Either } from "effect"
import { type ActivityId, activityIdOf } from "./Activity.js"
import { decodeExactBase64Url } from "./Base64.js"
import { isUuid } from "./Uuid.js"

/** A decoded watermark: a seq, or (legacy form) the id of the last activity seen. */
export type Position = Data.TaggedEnum<{
  Seq: { readonly seq: number }
  ActivityId: { readonly id: ActivityId }
}>
export const Position = Data.taggedEnum<Position>()

/** Longer than any watermark form: a longer text is refused before it is decoded. */
const MAX_WATERMARK_CHARS = 200

/** The text of a Base64 watermark, URL-safe or standard, padded or not, of a whole number of bytes. */
const decodeBase64Url = (text: string): string | undefined => {
  if (!/^[A-Za-z0-9_\-+/]+={0,2}$/.test(text)) return undefined
  return decodeExactBase64Url(text.replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, ""))?.toString("utf8")
}

/** A seq written in decimal digits, up to the largest exact integer (2^53 - 1). */
const seqOf = (digits: string): number | undefined => {
  if (!/^\d{1,16}$/.test(digits)) return undefined
  const seq = Number(digits)
  return Number.isSafeInteger(seq) ? seq : undefined
}

/**
 * Reads every accepted watermark form: an integer, its decimal string, URL-safe Base64 of
 * `seq:<n>`, and the legacy Base64 activity-id form. Left when the input is none of them.
 */
export const decodeWatermark = (input: unknown): Either.Either<Position, string> => {
  if (typeof input === "number") {
    return Number.isSafeInteger(input) && input >= 0
      ? Either.right(Position.Seq({ seq: input }))
      : Either.left("a numeric watermark must be a non-negative integer")
  }
  if (typeof input !== "string" || input.length === 0 || input.length > MAX_WATERMARK_CHARS) return Either.left("malformed watermark")
  const plain = seqOf(input)
  if (plain !== undefined) return Either.right(Position.Seq({ seq: plain }))
  const decoded = decodeBase64Url(input)
  if (decoded !== undefined) {
    const seq = decoded.startsWith("seq:") ? seqOf(decoded.slice(4)) : undefined
    if (seq !== undefined) return Either.right(Position.Seq({ seq }))
    const legacy = /^(?:activity:)?([0-9a-fA-F-]{36})$/.exec(decoded)
    if (legacy !== null && isUuid(legacy[1]!)) return Either.right(Position.ActivityId({ id: activityIdOf(legacy[1]!) }))
  }
  return Either.left("malformed watermark")
}

/**
 * Whether a watermark is one of the deprecated opaque forms (Base64), not the plain integer seq:
 * a use of the deprecated form even when the position it names is refused.
 */
export const isOpaqueWatermark = (input: string): boolean => !/^\d+$/.test(input) && Either.isRight(decodeWatermark(input))

/**
 * The opaque watermark form (URL-safe Base64 of `seq:<n>`, unpadded) that Phoenix `activitySet` frames
 * still carry (client-api.md "Versioning" 3); `decodeWatermark` reads it back.
 */
export const encodeWatermark = (seq: number): string => Buffer.from(`seq:${seq}`, "utf8").toString("base64url")
