import type { SqlError } from "@effect/sql/SqlError"

const codeOf = (error: SqlError): string | undefined => {
  const cause = error.cause as { code?: unknown } | undefined
  return typeof cause?.code === "string" ? cause.code : undefined
}

/** The statement broke a unique constraint (23505). */
export const isUniqueViolation = (error: SqlError) => codeOf(error) === "23505"

/** The statement waited for a lock longer than `lock_timeout` (55P03); it rolled back. */
export const isLockTimeout = (error: SqlError) => codeOf(error) === "55P03"

/**
 * PostgreSQL refused a value of the statement (class 22, data exception: a NUL character, a date
 * that does not exist, a number out of range). The request carried it, so retrying cannot help.
 */
export const isDataException = (error: SqlError) => codeOf(error)?.startsWith("22") === true

const SQLSTATE = /^[0-9A-Z]{5}$/

/** Errors of a connection that was never opened: no server took it, or none could be reached. */
const CONNECT_FAILURES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH"])

/**
 * The statement never reached the server: no connection could be had for it (refused, timed out,
 * authentication failed). @effect/sql-pg names a failed checkout in its message, whatever the cause.
 */
const isNeverSent = (error: SqlError) =>
  error.message.startsWith("Failed to acquire connection") || CONNECT_FAILURES.has(codeOf(error) ?? "")

/**
 * Whether a failed statement may still have committed: no SQLSTATE, or class 08, 57P or XX (ADR 0018).
 * A statement never sent cannot have.
 */
export const isOutcomeUnknown = (error: SqlError) => {
  if (isNeverSent(error)) return false
  const code = codeOf(error)
  return code === undefined || !SQLSTATE.test(code) || code.startsWith("08") || code.startsWith("57P") ||
    code.startsWith("XX")
}

/** SQLSTATEs of a database that cannot serve now, where a retry may succeed (ADR 0018). */
const UNAVAILABLE = /^(08|53|57|58)|^(40001|40P01|55P03|25P03|25006)$/

/**
 * The database could not serve the statement (503, retry later); any other SQLSTATE is a bug (ADR 0018).
 */
export const isUnavailable = (error: SqlError) => {
  if (isNeverSent(error)) return true
  const code = codeOf(error)
  return code === undefined || !SQLSTATE.test(code) || UNAVAILABLE.test(code)
}

/** A failed statement that is a bug of ours: neither `isUnavailable` nor a value of the request refused. */
export const isStatementBug = (error: SqlError) => !isUnavailable(error) && !isDataException(error)
