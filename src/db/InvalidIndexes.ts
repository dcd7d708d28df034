import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Drops the named indexes a failed `CREATE INDEX CONCURRENTLY` left invalid, so that a migration's
 * `CREATE INDEX IF NOT EXISTS` builds them again instead of taking them as built.
 */
export const dropInvalidIndexes = (names: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ name: string }>`
      SELECT c.relname AS name FROM pg_index i
      JOIN pg_class c ON c.oid = i.indexrelid
      JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = current_schema()
      WHERE NOT i.indisvalid AND c.relname = ANY(${names})`.pipe(
      Effect.flatMap((invalid) => Effect.forEach(invalid, ({ name }) => sql`DROP INDEX ${sql(name)}`, { discard: true }))
    ))
