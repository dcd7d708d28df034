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
 * Whether a failed statement may still have committed: no SQLSTATE (the connection broke, or no
 * answer came in time), a connection exception (class 08), or the server stopping (57P) or failing
 * (XX) under it. Any other SQLSTATE answers a statement that rolled back, and a statement that was
 * never sent (`isNeverSent`) cannot have committed.
 */
export const isOutcomeUnknown = (error: SqlError) => {
  if (isNeverSent(error)) return false
  const code = codeOf(error)
  return code === undefined || !SQLSTATE.test(code) || code.startsWith("08") || code.startsWith("57P") ||
    code.startsWith("XX")
}

/**
 * SQLSTATEs of a database that cannot serve now, where a retry may succeed: connection exception
 * (08), insufficient resources (53), operator intervention (57: a cancelled statement, a shutdown),
 * system error (58), serialization failure and deadlock (40001, 40P01), a lock or idle-transaction
 * timeout (55P03, 25P03), and a read-only transaction (25006: a standby after a failover).
 */
const UNAVAILABLE = /^(08|53|57|58)|^(40001|40P01|55P03|25P03|25006)$/

/**
 * The database could not serve the statement (503, retry later): it never reached the server, no
 * answer came (no SQLSTATE), or its SQLSTATE is of a connection, resource or timeout class. Any
 * other SQLSTATE (42: a statement that does not fit the schema, an unhandled 23, XX000) is a bug.
 */
export const isUnavailable = (error: SqlError) => {
  if (isNeverSent(error)) return true
  const code = codeOf(error)
  return code === undefined || !SQLSTATE.test(code) || UNAVAILABLE.test(code)
}

/** A failed statement that is a bug of ours: neither `isUnavailable` nor a value of the request refused. */
export const isStatementBug = (error: SqlError) => !isUnavailable(error) && !isDataException(error)
