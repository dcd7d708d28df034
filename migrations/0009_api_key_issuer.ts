import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The key that issued a scoped key through the management API, so that revoking a key can revoke
 * the keys it issued (ADR 0016). NULL for primary keys and for keys the admin API issued. Keys
 * issued before this by scoped keys are linked through `created_by`, which names the issuing key;
 * those issued with a primary key stay unlinked: their label names the tenant, not which primary.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE api_keys ADD COLUMN issuer_id uuid REFERENCES api_keys (id) ON DELETE CASCADE`
  yield* sql`CREATE INDEX api_keys_issuer ON api_keys (issuer_id) WHERE issuer_id IS NOT NULL`
  yield* sql`
    UPDATE api_keys AS issued SET issuer_id = issuer.id
    FROM api_keys AS issuer
    WHERE issuer.kind = 'scoped' AND issuer.tenant_id = issued.tenant_id
      AND issued.created_by = 'tenant_api:' || issuer.id::text`
})
