import Pg from "pg"

const MARK = /^\/\* prepared:([a-z_]+) \*\//

/**
 * The marker that makes a statement a named prepared statement: put it first in the SQL text.
 * The text must be the same on every call (values go in parameters, arrays as one parameter).
 */
export const prepared = (name: string) => `/* prepared:${name} */`

type Query = (config: unknown, values?: unknown, callback?: unknown) => unknown

/**
 * A pg client that runs marked statements (the hot ones, ADR 0006) as named prepared statements,
 * planned once per connection; it closes itself after a `query_timeout` so that its pool drops it.
 */
export class PreparingClient extends Pg.Client {}

/** pg's error when `query_timeout` passed without an answer; the statement may still be running. */
const READ_TIMEOUT = "Query read timeout"

/**
 * A connection whose statement went unanswered still runs it and would queue the next behind it, so it
 * is closed and its pool drops it.
 */
const closingAfterReadTimeout = (client: Pg.Client, callback: unknown) =>
  typeof callback !== "function" ? callback : (error: unknown, result: unknown) => {
    if (error instanceof Error && error.message === READ_TIMEOUT) client.end(() => {})
    return (callback as (error: unknown, result: unknown) => void)(error, result)
  }

const plainQuery = Pg.Client.prototype.query as unknown as Query
;(PreparingClient.prototype as unknown as { query: Query }).query = function(
  this: Pg.Client,
  config: unknown,
  values?: unknown,
  callback?: unknown
) {
  const name = typeof config === "string" ? MARK.exec(config)?.[1] : undefined
  return name === undefined
    ? plainQuery.call(this, config, values, closingAfterReadTimeout(this, callback))
    : plainQuery.call(this, { name, text: config, values }, closingAfterReadTimeout(this, callback))
}
