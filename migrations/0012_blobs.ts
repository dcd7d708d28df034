import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Uploaded files (`BlobStore`), kept in PostgreSQL so that every node serves every file. No foreign
 * keys, as for activities (ADR 0008): a tenant or channel delete must not delete its files in its
 * own transaction; the purge job removes the files of deleted conversations in chunks.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE blobs (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL,
      conversation_id uuid NOT NULL,
      content_type text NOT NULL,
      name text NOT NULL,
      size integer NOT NULL,
      bytes bytea NOT NULL,
      inserted_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX blobs_conversation ON blobs (conversation_id)`
})
