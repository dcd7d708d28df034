import { Effect, Option } from "effect"
import { createHash } from "node:crypto"
import { PreconditionFailed } from "./ApiError.js"

/** A strong ETag of a resource's representation: it changes exactly when the JSON does. */
export const etagOf = (representation: unknown): string =>
  `"${createHash("sha256").update(JSON.stringify(representation)).digest("base64url").slice(0, 27)}"`

/**
 * Checks `If-Match` against the current ETag: absent or `*` matches, else one listed tag must equal it,
 * compared strongly (RFC 9110), so a weak tag never matches.
 */
export const checkIfMatch = (ifMatch: Option.Option<string>, current: string) =>
  Option.match(ifMatch, {
    onNone: () => Effect.void,
    onSome: (header) => {
      const tags = header.split(",").map((t) => t.trim())
      return tags.includes("*") || tags.includes(current)
        ? Effect.void
        : Effect.fail(new PreconditionFailed({ message: "If-Match does not match the current version", current_etag: current }))
    }
  })
