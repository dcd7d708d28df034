import type { SqlClient } from "@effect/sql"
import { Context, Effect, Layer } from "effect"
import { boundedClient } from "./Database.js"

/** Connections of the counters' client: the sync, and the reads decisions wait for. */
const COUNTER_CONNECTIONS = 2

/** Every statement of the counters' client is cancelled after this; a decision waits no longer for a read. */
export const COUNTERS_STATEMENT_MS = 1000
/** How much longer the client waits for an answer: the server's cancellation arrives first when it can. */
const ANSWER_MARGIN_MS = 500

/**
 * The rate-limit counters' `SqlClient`: connections of their own, each statement bounded, so a
 * stalled one is closed rather than handed to the next sync to queue behind (as the main pool would).
 */
export class CountersClient extends Context.Tag("parley/CountersClient")<CountersClient, SqlClient.SqlClient>() {}

/** `CountersClient` on the configured database (the node's client on the embedded one). */
export const CountersClientLive = Layer.scoped(
  CountersClient,
  Effect.map(
    boundedClient(COUNTER_CONNECTIONS, {
      connectMs: COUNTERS_STATEMENT_MS,
      statementMs: COUNTERS_STATEMENT_MS,
      queryMs: COUNTERS_STATEMENT_MS + ANSWER_MARGIN_MS
    }),
    ({ client }) => client
  )
)
