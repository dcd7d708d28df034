import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Uploaded files (`BlobStore`), kept in PostgreSQL so that every node serves every file. A file
 * goes with its conversation (and tenant): a purged conversation takes its files with it.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE blobs (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      conversation_id uuid NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
      content_type text NOT NULL,
      name text NOT NULL,
      size integer NOT NULL,
      bytes bytea NOT NULL,
      inserted_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX blobs_conversation ON blobs (conversation_id)`
  yield* sql`CREATE INDEX blobs_tenant ON blobs (tenant_id)`
})
