import { expect, layer } from "@effect/vitest"
import { Effect, Exit, Schedule } from "effect"
import { ConversationPurge } from "../src/conversations/ConversationPurge.js"
import { dropInvalidIndexes } from "../src/db/InvalidIndexes.js"
import { pruneAuditLog } from "../src/ops/Housekeeping.js"
import { insertChannel, insertConversation, tenantApi } from "./support/Fixtures.js"
import { query } from "./support/TestDatabase.js"
import { admin, createTenant, manage, TestNodeLive } from "./support/TestNode.js"

/**
 * Deleting a channel or tenant removes its conversations at once; their activities and deliveries
 * are purged in the background (server-apis.md), by the purge job (src/conversations/ConversationPurge.ts).
 */

const countOf = (table: "activities" | "deliveries" | "blobs", conversationId: string) =>
  Effect.map(
    query<{ n: string }>(`SELECT count(*) AS n FROM ${table} WHERE conversation_id = $1`, [conversationId]),
    (rows) => Number(rows[0]!.n)
  )

const queued = Effect.map(
  query<{ conversation_id: string }>("SELECT conversation_id FROM conversation_purges ORDER BY conversation_id"),
  (rows) => rows.map((r) => r.conversation_id)
)

/** `n` messages through the API (each with its delivery to the origin channel). */
const post = (key: string, conversationId: string, n: number) =>
  Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) =>
    Effect.map(tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: `m${i}` }), (reply) => {
      expect(reply.status).toBe(201)
    }), { discard: true })

// The job runs once at start and then hourly: each test purges when it chooses.
layer(TestNodeLive({ PURGE_INTERVAL_SECONDS: "3600" }), { excludeTestServices: true })("background purge", (it) => {
  it.effect("a channel delete removes its conversations at once; their activities and deliveries go with the purge", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const doomed = yield* insertChannel(tenant.id)
      const kept = yield* insertChannel(tenant.id)
      const [gone, stays] = yield* Effect.all([insertConversation(tenant.id, doomed.id), insertConversation(tenant.id, kept.id)])
      yield* post(tenant.api_key, gone, 3)
      yield* post(tenant.api_key, stays, 2)
      expect(yield* countOf("deliveries", gone)).toBe(3)

      expect((yield* manage(tenant.api_key, "DELETE", `/channels/${doomed.id}`)).status).toBe(204)
      expect(yield* query("SELECT id FROM conversations WHERE id = $1", [gone])).toEqual([])
      // Not in the deleting transaction: queued instead.
      expect(yield* countOf("activities", gone)).toBe(3)
      expect(yield* queued).toEqual([gone])
      // The conversation is gone for appends too, whatever its entity still remembers.
      const late = yield* tenantApi(tenant.api_key, "POST", `/conversations/${gone}/activities`, { text: "late" })
      expect(late.status).toBe(404)
      expect(yield* countOf("activities", gone)).toBe(3)

      yield* Effect.flatMap(ConversationPurge, (purge) => purge.purge(10))
      expect(yield* countOf("activities", gone)).toBe(0)
      expect(yield* countOf("deliveries", gone)).toBe(0)
      expect(yield* queued).toEqual([])
      expect(yield* countOf("activities", stays)).toBe(2)
      expect(yield* countOf("deliveries", stays)).toBe(2)
    }))

  it.effect("uploaded files of a deleted conversation go with the purge, a bounded number per statement", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id)
      const [gone, stays] = yield* Effect.all([insertConversation(tenant.id, channel.id), insertConversation(tenant.id, channel.id)])
      const files = (conversationId: string, n: number) =>
        query(
          `INSERT INTO blobs (id, tenant_id, conversation_id, content_type, name, size, bytes)
           SELECT gen_random_uuid(), $2, $1, 'text/plain', 'a.txt', 1, '\\x61' FROM generate_series(1, $3::int)`,
          [conversationId, tenant.id, n]
        )
      // More than one statement's worth (20).
      yield* files(gone, 45)
      yield* files(stays, 2)

      yield* query("DELETE FROM conversations WHERE id = $1", [gone])
      // Not in the deleting transaction.
      expect(yield* countOf("blobs", gone)).toBe(45)
      const purge = yield* ConversationPurge
      yield* purge.purge(1)
      expect(yield* countOf("blobs", gone)).toBe(25)
      expect(yield* queued).toEqual([gone])
      yield* purge.purge(10)
      expect(yield* countOf("blobs", gone)).toBe(0)
      expect(yield* queued).toEqual([])
      expect(yield* countOf("blobs", stays)).toBe(2)
    }))

  it.effect("a tenant delete queues every conversation; large ones are purged a chunk at a time", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id)
      const [large, small] = yield* Effect.all([insertConversation(tenant.id, channel.id), insertConversation(tenant.id, channel.id)])
      // Stored directly, above any seq the API will use; both need more than one chunk.
      const bulk = (conversationId: string, n: number) =>
        query(
          `INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text)
           SELECT $1, 100 + s, gen_random_uuid(), $2, 'message', 'user', 'bulk' FROM generate_series(1, $3::int) AS s`,
          [conversationId, tenant.id, n]
        )
      yield* bulk(large, 2500)
      yield* bulk(small, 1200)
      yield* post(tenant.api_key, small, 1)

      expect((yield* admin("DELETE", `/tenants/${tenant.id}`)).status).toBe(204)
      expect(yield* queued).toEqual([large, small].sort())

      const purge = yield* ConversationPurge
      // One conversation at a time, a thousand activities per statement.
      yield* purge.purge(1)
      const afterOne = (yield* countOf("activities", large)) + (yield* countOf("activities", small))
      expect(afterOne).toBe(2500 + 1201 - 1000)
      expect(yield* purge.backlog).toBe(2)
      yield* purge.purge(100)
      expect(yield* countOf("activities", large)).toBe(0)
      expect(yield* countOf("activities", small)).toBe(0)
      expect(yield* countOf("deliveries", small)).toBe(0)
      expect(yield* purge.backlog).toBe(0)
    }))
  it.effect("small conversations are purged fifty to a statement, a chunk's last one only once all of it is gone", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id)
      const ids = yield* Effect.all(Array.from({ length: 70 }, () => insertConversation(tenant.id, channel.id)))
      const sorted = [...ids].sort()
      // Three activities each; the 20th in key order has 990.
      yield* query(
        `INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text)
         SELECT c, s, gen_random_uuid(), $2, 'message', 'user', 'bulk'
         FROM UNNEST($1::uuid[]) AS c, generate_series(1, CASE WHEN c = $3::uuid THEN 990 ELSE 3 END) AS s`,
        [ids, tenant.id, sorted[19]]
      )
      expect((yield* admin("DELETE", `/tenants/${tenant.id}`)).status).toBe(204)
      const total = () =>
        Effect.map(
          query<{ n: number }>("SELECT count(*)::int AS n FROM activities WHERE conversation_id = ANY($1::uuid[])", [ids]),
          (rows) => rows[0]!.n
        )
      const purge = yield* ConversationPurge
      expect(yield* purge.backlog).toBe(70)
      // 19 × 3 + 990 = 1,047 rows in the first 20: the chunk's thousand end inside the 20th, which stays queued.
      yield* purge.purge(1)
      expect(yield* total()).toBe(69 * 3 + 990 - 1000)
      expect(yield* queued).toEqual(sorted.slice(19))
      // The next takes fifty: the 20th's rest and 49 more, all emptied and dequeued; one is left.
      yield* purge.purge(1)
      expect(yield* queued).toEqual(sorted.slice(69))
      expect(yield* total()).toBe(3)
      yield* purge.purge(1)
      expect(yield* total()).toBe(0)
      expect(yield* queued).toEqual([])
    }))

  it.effect("an index a failed CREATE INDEX CONCURRENTLY left invalid is dropped, so the migration builds it", () =>
    Effect.gen(function*() {
      const table = `t_${crypto.randomUUID().replaceAll("-", "")}`
      yield* query(`CREATE TABLE ${table} (x int)`)
      yield* query(`INSERT INTO ${table} VALUES (1), (1)`)
      yield* query(`CREATE INDEX ${table}_valid ON ${table} (x)`)
      // Duplicates: the build fails and leaves the index behind, invalid.
      expect(Exit.isFailure(yield* Effect.exit(query(`CREATE UNIQUE INDEX CONCURRENTLY ${table}_x ON ${table} (x)`)))).toBe(true)
      const indexes = query<{ name: string; valid: boolean }>(
        `SELECT c.relname AS name, i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
         WHERE i.indrelid = $1::regclass ORDER BY 1`,
        [table]
      )
      expect(yield* indexes).toEqual([{ name: `${table}_valid`, valid: true }, { name: `${table}_x`, valid: false }])
      yield* dropInvalidIndexes([`${table}_x`, `${table}_valid`])
      expect(yield* indexes).toEqual([{ name: `${table}_valid`, valid: true }])
    }))

  it.effect("the audit log keeps AUDIT_RETENTION_DAYS of rows, oldest pruned first in chunks; 0 keeps all", () =>
    Effect.gen(function*() {
      const tenantId = crypto.randomUUID()
      // 25,000 rows 40 days old (more than two chunks), one 20 days old, one new.
      yield* query(
        `INSERT INTO audit_log (id, tenant_id, actor_type, actor_id, action, resource_type, inserted_at)
         SELECT gen_random_uuid(), $1, 'system', 'test', 'old', 'test', now() - interval '40 days' - i * interval '1 second'
         FROM generate_series(1, 25000) AS i`,
        [tenantId]
      )
      for (const [action, age] of [["recent", "20 days"], ["new", "0 days"]]) {
        yield* query(
          `INSERT INTO audit_log (id, tenant_id, actor_type, actor_id, action, resource_type, inserted_at)
           VALUES (gen_random_uuid(), $1, 'system', 'test', $2, 'test', now() - $3::interval)`,
          [tenantId, action, age]
        )
      }
      const left = Effect.map(
        query<{ action: string; n: string }>(
          "SELECT action, count(*) AS n FROM audit_log WHERE tenant_id = $1 GROUP BY action ORDER BY action",
          [tenantId]
        ),
        (rows) => rows.map((r) => `${r.action}:${r.n}`)
      )
      expect(yield* pruneAuditLog(0)).toBe(0)
      expect(yield* left).toEqual(["new:1", "old:25000", "recent:1"])
      expect(yield* pruneAuditLog(30)).toBeGreaterThanOrEqual(25_000)
      expect(yield* left).toEqual(["new:1", "recent:1"])
      yield* pruneAuditLog(10)
      expect(yield* left).toEqual(["new:1"])
    }))

  // A delete looks up the rows referencing what it deletes; without such an index that is a scan of
  // every tenant's rows, which grows past the statement timeout with the installation.
  it.effect("every foreign key has an index leading with the column that names its parent row", () =>
    Effect.gen(function*() {
      // The last column: tenant-scoped keys lead with tenant_id, which every row of the tenant shares.
      const unindexed = yield* query<{ constraint: string }>(`
        SELECT c.conrelid::regclass || '.' || c.conname AS constraint
        FROM pg_constraint c
        JOIN pg_namespace n ON n.oid = c.connamespace AND n.nspname = current_schema()
        WHERE c.contype = 'f' AND NOT EXISTS (
          SELECT 1 FROM pg_index i
          JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
          WHERE i.indrelid = c.conrelid AND i.indisvalid
            AND i.indkey[0] = c.conkey[array_length(c.conkey, 1)]
            AND (i.indpred IS NULL OR pg_get_expr(i.indpred, i.indrelid) = '(' || a.attname || ' IS NOT NULL)')
        )
        ORDER BY 1`)
      expect(unindexed.map((r) => r.constraint)).toEqual([])
    }))
})

layer(TestNodeLive({ PURGE_INTERVAL_SECONDS: "1" }), { excludeTestServices: true })("purge job", (it) => {
  it.effect("runs every PURGE_INTERVAL_SECONDS without being asked", () =>
    Effect.gen(function*() {
      const tenant = yield* createTenant()
      const channel = yield* insertChannel(tenant.id)
      const conversationId = yield* insertConversation(tenant.id, channel.id)
      yield* post(tenant.api_key, conversationId, 2)
      expect((yield* manage(tenant.api_key, "DELETE", `/channels/${channel.id}`)).status).toBe(204)
      yield* countOf("activities", conversationId).pipe(
        Effect.filterOrFail((n) => n === 0),
        Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("15 seconds")))
      )
      expect(yield* queued).toEqual([])
    }))
})
