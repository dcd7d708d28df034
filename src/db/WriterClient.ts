import type { SqlClient } from "@effect/sql"
import { Context, Layer, type Option } from "effect"
import {
  WRITE_CONNECT_TIMEOUT_MS,
  WRITE_LOCK_TIMEOUT_MS,
  WRITE_QUERY_TIMEOUT_MS,
  WRITE_STATEMENT_TIMEOUT_MS
} from "../conversations/WriteTimings.js"
import { boundedClient } from "./Database.js"
import type { MeasuredPool } from "./MeasuredPool.js"

/** Connections of the activity writer: one per batch statement in flight. */
export const WRITER_CONNECTIONS = 2

/**
 * The activity writer's connections, apart from the node's pool: each statement bounded by the write
 * timings, reaching its rows by index (`boundedClient`). On the embedded database `client` is the
 * node's and `pool` is absent.
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
