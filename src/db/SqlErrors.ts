import type { SqlError } from "@effect/sql/SqlError"

const codeOf = (error: SqlError): string | undefined => {
  const cause = error.cause as { code?: unknown } | undefined
  return typeof cause?.code === "string" ? cause.code : undefined
}

/** The statement broke a unique constraint (23505). */
export const isUniqueViolation = (error: SqlError) => codeOf(error) === "23505"

/** The statement waited for a lock longer than `lock_timeout` (55P03); it rolled back. */
export const isLockTimeout = (error: SqlError) => codeOf(error) === "55P03"

/** The statement broke a foreign key (23503). */
export const isForeignKeyViolation = (error: SqlError) => codeOf(error) === "23503"

/**
 * PostgreSQL refused a value of the statement (class 22, data exception: a NUL character, a date
 * that does not exist, a number out of range). The request carried it, so retrying cannot help.
 */
export const isDataException = (error: SqlError) => codeOf(error)?.startsWith("22") === true

/**
 * Whether a failed statement may still have committed: no SQLSTATE (the connection broke, or no
 * answer came in time), a connection exception (class 08), or the server stopping (57P) or failing
 * (XX) under it. Any other SQLSTATE answers a statement that rolled back.
 */
export const isOutcomeUnknown = (error: SqlError) => {
  const code = codeOf(error)
  return code === undefined || !/^[0-9A-Z]{5}$/.test(code) || code.startsWith("08") || code.startsWith("57P") ||
    code.startsWith("XX")
}

