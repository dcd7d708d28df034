/**
 * The time budget of a write whose caller may give up (ADR 0004). A write starts only before its
 * deadline, `WRITE_DEADLINE_MS` after the request arrived, on a connection it waits for at most
 * `WRITE_CONNECT_TIMEOUT_MS`; PostgreSQL cancels its statement after `WRITE_STATEMENT_TIMEOUT_MS`,
 * and the writer stops waiting for the answer after `WRITE_QUERY_TIMEOUT_MS`. So once
 * `WRITE_SETTLED_AFTER_MS` have passed since the deadline, a draft is stored or never will be (a
 * commit PostgreSQL itself holds up, a slow WAL flush or a synchronous replica, aside): a caller
 * left without an answer looks its draft up then, and a 503 means nothing was stored.
 */
export const WRITE_DEADLINE_MS = 5_000
export const WRITE_CONNECT_TIMEOUT_MS = 2_000
export const WRITE_STATEMENT_TIMEOUT_MS = 2_000
/**
 * How long a write waits for a row another session holds (a delete cascading to its conversation, a
 * write of another owner): under `WRITE_STATEMENT_TIMEOUT_MS`, so such a wait fails its batch
 * statement (55P03) in time for the batch's other groups to be written alone; without it, the
 * statement timeout failed every group of the batch.
 */
export const WRITE_LOCK_TIMEOUT_MS = 1_000
export const WRITE_QUERY_TIMEOUT_MS = WRITE_STATEMENT_TIMEOUT_MS + 1_000
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
