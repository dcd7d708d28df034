import { Data, Effect, Either } from "effect"
import { fileTypeFromBuffer } from "file-type"

/** The types a tenant without `allowed_upload_types` may upload (CONTRACT.md §7). */
export const DEFAULT_UPLOAD_TYPES: ReadonlyArray<string> = [
  "image/png",
  "image/jpeg",
  "image/gif",
  "image/webp",
  "application/pdf",
  "text/plain"
]

/** What a file of no type `file-type` knows, and not UTF-8 text, is called in a 415. */
const UNKNOWN_TYPE = "application/octet-stream"

/** `file-type` reads at most this far into a file: enough for every signature it knows. */
const SNIFF_BYTES = 4100

class SniffFailed extends Data.TaggedError("SniffFailed")<{ readonly cause: unknown }> {}

const strictUtf8 = new TextDecoder("utf-8", { fatal: true })
const isUtf8 = (bytes: Uint8Array) => Either.isRight(Either.try(() => strictUtf8.decode(bytes)))

/**
 * A file's content type from its bytes alone, never its name or sent type: a `file-type` signature,
 * else `text/plain` for strict UTF-8, else `application/octet-stream`.
 */
export const sniffUploadType = (bytes: Uint8Array): Effect.Effect<string> =>
  Effect.tryPromise({
    try: () => fileTypeFromBuffer(bytes.subarray(0, SNIFF_BYTES)),
    catch: (cause) => new SniffFailed({ cause })
  }).pipe(
    // A file whose head breaks a parser of file-type has no type it knows.
    Effect.catchTag("SniffFailed", () => Effect.succeed(undefined)),
    Effect.map((found) => found?.mime ?? (isUtf8(bytes) ? "text/plain" : UNKNOWN_TYPE))
  )

/** Whether a tenant with these `allowed_upload_types` (null: the default list) accepts `contentType`. */
export const isAllowedUploadType = (allowed: ReadonlyArray<string> | null, contentType: string) =>
  (allowed ?? DEFAULT_UPLOAD_TYPES).includes(contentType)
