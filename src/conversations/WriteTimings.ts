import { WRITE_CONNECT_TIMEOUT_MS, WRITE_QUERY_TIMEOUT_MS } from "../db/WriterClient.js"

/**
 * The time budget of a write whose caller may give up (ADR 0004): `WRITE_SETTLED_AFTER_MS` past its
 * deadline, a draft is stored or never will be, so a caller without an answer looks it up then.
 */
export const WRITE_DEADLINE_MS = 5_000
export const WRITE_SETTLED_AFTER_MS = WRITE_CONNECT_TIMEOUT_MS + WRITE_QUERY_TIMEOUT_MS + 500
/**
 * How long a look-up of drafts that may be stored waits for a write of their conversation still in
 * flight (a commit PostgreSQL holds up); past it their outcome is unknown.
 */
export const IN_FLIGHT_WAIT_MS = 500
/**
 * Until when, counted from the request's arrival, a caller waits for the owner's answer before
 * settling the append itself.
 */
export const ANSWER_TIMEOUT_MS = 8_000
