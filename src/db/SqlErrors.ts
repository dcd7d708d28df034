import type { SqlError } from "@effect/sql/SqlError"

const codeOf = (error: SqlError): string | undefined => {
  const cause = error.cause as { code?: unknown } | undefined
  return typeof cause?.code === "string" ? cause.code : undefined
}

/** The statement broke a unique constraint (23505). */
export const isUniqueViolation = (error: SqlError) => codeOf(error) === "23505"

/** The statement broke a foreign key (23503). */
export const isForeignKeyViolation = (error: SqlError) => codeOf(error) === "23503"

/**
 * PostgreSQL refused a value of the statement (class 22, data exception: a NUL character, a date
 * that does not exist, a number out of range). The request carried it, so retrying cannot help.
 */
export const isDataException = (error: SqlError) => codeOf(error)?.startsWith("22") === true
