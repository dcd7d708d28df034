/**
 * The time budget of a write whose caller may give up (ADR 0004). A write starts only before its
 * deadline, `WRITE_DEADLINE_MS` after the request; PostgreSQL cancels its statement after
 * `WRITE_STATEMENT_TIMEOUT_MS`; the caller waits `ANSWER_TIMEOUT_MS`, longer than both together. A
 * write that commits has committed before its caller gives up, so a 503 means nothing was stored.
 */
export const WRITE_DEADLINE_MS = 5_000
export const WRITE_STATEMENT_TIMEOUT_MS = 2_000
export const ANSWER_TIMEOUT_MS = 8_000
