import type { SqlClient } from "@effect/sql"
import { Context, Layer, type Option } from "effect"
import { boundedClient } from "./Database.js"
import type { MeasuredPool } from "./MeasuredPool.js"

/** Connections of the activity writer: one per batch statement in flight. */
export const WRITER_CONNECTIONS = 2

/**
 * A write's wait for a connection, its statement's server-side timeout and the writer's wait for the
 * answer (the write's whole budget: WriteTimings).
 */
export const WRITE_CONNECT_TIMEOUT_MS = 2_000
const WRITE_STATEMENT_TIMEOUT_MS = 2_000
export const WRITE_QUERY_TIMEOUT_MS = WRITE_STATEMENT_TIMEOUT_MS + 1_000
/**
 * A write's wait for a row another session holds, under the statement timeout so that the failed batch
 * (55P03) leaves time for its other groups to be written alone.
 */
const WRITE_LOCK_TIMEOUT_MS = 1_000

/**
 * The activity writer's connections, apart from the node's pool, each statement bounded by the write
 * timings; on the embedded database `client` is the node's and `pool` is absent.
 */
export class WriterClient extends Context.Tag("parley/WriterClient")<
  WriterClient,
  { readonly client: SqlClient.SqlClient; readonly pool: Option.Option<MeasuredPool> }
>() {}

/** `WriterClient` for the configured database; its pool closes with the layer. */
export const WriterClientLive = Layer.scoped(
  WriterClient,
  boundedClient(WRITER_CONNECTIONS, {
    connectMs: WRITE_CONNECT_TIMEOUT_MS,
    statementMs: WRITE_STATEMENT_TIMEOUT_MS,
    queryMs: WRITE_QUERY_TIMEOUT_MS,
    lockMs: WRITE_LOCK_TIMEOUT_MS
  })
)
