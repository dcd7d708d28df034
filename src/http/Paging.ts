import { Effect, Option, Schema } from "effect"
import { BadRequest } from "../domain/ApiError.js"
import { decodeExactBase64Url } from "../domain/Base64.js"
import { parseInstant } from "../domain/Instant.js"
import { isUuid } from "../domain/Uuid.js"

/** The `limit` of a list: taken when none is asked for, and the most one page holds. */
export interface PageSize {
  readonly fallback: number
  readonly max: number
}

/** A page of a conversation's activities (server-apis.md "Limits"). */
export const ACTIVITY_PAGE: PageSize = { fallback: 100, max: 1000 }
/** A page of the tenant's conversations (server-apis.md, `GET /conversations`). */
export const CONVERSATION_PAGE: PageSize = { fallback: 50, max: 500 }

/**
 * Reads a `limit` query parameter: the page's fallback when absent, capped at its max however many
 * digits it has, 400 when not a positive integer.
 */
export const parseLimit = (raw: string | undefined, page: PageSize) =>
  raw === undefined
    ? Effect.succeed(page.fallback)
    : /^\d+$/.test(raw) && /[1-9]/.test(raw)
    ? Effect.succeed(Math.min(Number(raw), page.max))
    : Effect.fail(new BadRequest({ message: "limit must be a positive integer" }))

/** An opaque keyset cursor of (timestamp, id). */
export const encodeCursor = (at: string, id: string) => Buffer.from(JSON.stringify([at, id])).toString("base64url")

/** A keyset page as the tenant API answers it: `{data, meta: {next_cursor, has_more, limit}}`. */
export const pageAnswer = <Item extends { readonly inserted_at: string; readonly id: string }>(
  page: { readonly items: ReadonlyArray<Item>; readonly hasMore: boolean },
  limit: number
) => {
  const last = page.items[page.items.length - 1]
  return {
    data: page.items,
    meta: {
      next_cursor: page.hasMore && last !== undefined ? encodeCursor(last.inserted_at, last.id) : null,
      has_more: page.hasMore,
      limit
    }
  }
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?Z$/

/** A UTC instant in the cursor's form (`Z`, 1–6 fraction digits) that exists (no 30 February, no hour 25, no year 0). */
const isInstant = (text: string) => ISO.test(text) && Option.isSome(parseInstant(text))

/** Reads a cursor made by `encodeCursor`; 400 when it is not one. */
export const decodeCursor = (raw: string) =>
  Effect.try({
    try: () => JSON.parse(decodeExactBase64Url(raw)?.toString("utf8") ?? "") as unknown,
    catch: () => new BadRequest({ message: "invalid cursor" })
  }).pipe(
    Effect.flatMap((value) =>
      Array.isArray(value) && value.length === 2 && typeof value[0] === "string" && isInstant(value[0]) &&
        typeof value[1] === "string" && isUuid(value[1])
        ? Effect.succeed([value[0], value[1]] as const)
        : Effect.fail(new BadRequest({ message: "invalid cursor" }))
    )
  )

/** The id a query parameter names, decoded by `id` (a branded UUID); 400 unless it is a UUID. */
export const parseId = <A>(id: Schema.Schema<A, string>, raw: string, name: string) =>
  Schema.decode(id)(raw).pipe(Effect.mapError(() => new BadRequest({ message: `${name} must be a UUID` })))
