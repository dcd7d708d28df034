import { NodeContext } from "@effect/platform-node"
import { PgMigrator } from "@effect/sql-pg"
import { Layer } from "effect"
import { SetupClientLive } from "./Database.js"
import { oneNodeAtATime } from "./SetupLock.js"
import foundation from "../../migrations/0001_foundation.js"
import rateLimitCounters from "../../migrations/0002_rate_limit_counters.js"
import appendPath from "../../migrations/0003_append_path.js"
import backgroundPurge from "../../migrations/0004_background_purge.js"
import rateLimitWindowEnd from "../../migrations/0005_rate_limit_window_end.js"
import rateLimitCountsPerNode from "../../migrations/0006_rate_limit_counts_per_node.js"
import foreignKeyIndexes from "../../migrations/0007_foreign_key_indexes.js"
import auditLogByTime from "../../migrations/0008_audit_log_by_time.js"
import apiKeyIssuer from "../../migrations/0009_api_key_issuer.js"
import clientTokens from "../../migrations/0010_client_tokens.js"
import blobs from "../../migrations/0012_blobs.js"
import readPositions from "../../migrations/0013_read_positions.js"
import deliveryOutbox from "../../migrations/0014_delivery_outbox.js"
import channelSecretSealed from "../../migrations/0015_channel_secret_sealed.js"
import channelCircuitFailures from "../../migrations/0016_channel_circuit_failures.js"

/** Every shipped migration, by name; readiness reports any that is not applied. */
export const migrations = {
  "0001_foundation": foundation,
  "0002_rate_limit_counters": rateLimitCounters,
  "0003_append_path": appendPath,
  "0004_background_purge": backgroundPurge,
  "0005_rate_limit_window_end": rateLimitWindowEnd,
  "0006_rate_limit_counts_per_node": rateLimitCountsPerNode,
  "0007_foreign_key_indexes": foreignKeyIndexes,
  "0008_audit_log_by_time": auditLogByTime,
  "0009_api_key_issuer": apiKeyIssuer,
  "0010_client_tokens": clientTokens,
  "0012_blobs": blobs,
  "0013_read_positions": readPositions,
  "0014_delivery_outbox": deliveryOutbox,
  "0015_channel_secret_sealed": channelSecretSealed,
  "0016_channel_circuit_failures": channelCircuitFailures
} as const

/**
 * Applies pending migrations at start. PgMigrator creates its table unguarded, so starting nodes take
 * turns under the setup lock; the setup pool keeps a long migration clear of the statement timeout.
 */
export const MigrationsLive = oneNodeAtATime(PgMigrator.layer({
  loader: PgMigrator.fromRecord(migrations)
}).pipe(Layer.provide(SetupClientLive))).pipe(Layer.provide(NodeContext.layer))
