import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Client-token revocations (ADR 0025). `client_token_revocations` is a log every node follows by
 * id: a revoked family, a rotated token (from `at_ms`, when its grace ends) or a user's cut-off
 * (tokens issued up to `at_ms`). A row is dropped once every token it covers has expired
 * (`expires_at_ms`). `client_token_rotations` makes a token's first refresh its rotation.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE client_token_revocations (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      kind text NOT NULL CHECK (kind IN ('family', 'rotation', 'user')),
      tenant_id uuid NOT NULL,
      channel_id uuid NOT NULL,
      subject text NOT NULL,
      at_ms bigint NOT NULL,
      expires_at_ms bigint NOT NULL
    )`
  yield* sql`CREATE INDEX client_token_revocations_expiry ON client_token_revocations (expires_at_ms)`
  yield* sql`
    CREATE TABLE client_token_rotations (
      jti uuid PRIMARY KEY,
      rotated_at_ms bigint NOT NULL,
      expires_at_ms bigint NOT NULL
    )`
  yield* sql`CREATE INDEX client_token_rotations_expiry ON client_token_rotations (expires_at_ms)`
})
