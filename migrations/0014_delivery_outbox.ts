import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * The `http_pull` outbox and the delivery routes (docs/delivery/routes.md).
 *
 * The outbox is not a table of its own: a delivery to an `http_pull` channel becomes an outbox entry
 * when it gets an `outbox_seq`, a per-channel, gap-free number handed out under the channel row's
 * lock from `channels.outbox_head`. Entries commit in seq order (the lock is held to commit), so a
 * poller that acknowledges up to a seq never skips one that commits later. `outbox_acked` is the
 * channel's acknowledged watermark. Adding nullable columns without a default rewrites nothing.
 *
 * `deliveries_failed` serves the channel replay and the channel's failed count; `deliveries_outbox`
 * the outbox pages and acknowledgements. Both are partial: appends write neither.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE channels ADD COLUMN outbox_head bigint NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE channels ADD COLUMN outbox_acked bigint NOT NULL DEFAULT 0`
  yield* sql`ALTER TABLE deliveries ADD COLUMN outbox_seq bigint`
  yield* sql`CREATE INDEX deliveries_failed ON deliveries (channel_id, inserted_at, id) WHERE status = 'failed'`
  yield* sql`CREATE UNIQUE INDEX deliveries_outbox ON deliveries (channel_id, outbox_seq) WHERE outbox_seq IS NOT NULL`
})
