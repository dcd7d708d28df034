import { Singleton } from "@effect/cluster"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Exit, Layer } from "effect"
import { AppConfig } from "../src/config/AppConfig.js"
import { WRITE_DEADLINE_MS } from "../src/conversations/WriteTimings.js"
import type { TenantId } from "../src/domain/Tenant.js"
import { JobRunner } from "../src/ops/JobRunner.js"
import { ConversationEntity } from "./ConversationEntity.js"

const PAGE = 500
const CALL_TIMEOUT = Duration.seconds(10)

/**
 * One check: closes the conversations idle for `idleCloseSeconds` through their entities, which skip
 * one active again since. Each close keeps a core in memory for minutes, hence `closesPerSecond`.
 */
export const closeIdleConversations = (idleCloseSeconds: number, closesPerSecond: number, page = PAGE) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const entity = yield* ConversationEntity.client
    const spacing = Duration.millis(1000 / closesPerSecond)
    /** Closes one page's conversations and logs how many it closed. */
    const closePage = (idle: ReadonlyArray<{ readonly id: string; readonly tenant_id: TenantId }>, cutoff: string) =>
      Effect.suspend(() => {
        let closed = 0
        return Effect.forEach(idle, ({ id, tenant_id }) =>
          entity(id).SetStatus({
            tenantId: tenant_id,
            status: "closed",
            reason: "expired",
            idleSince: cutoff,
            deadline: Date.now() + WRITE_DEADLINE_MS
          }).pipe(
            Effect.timeout(CALL_TIMEOUT),
            // Any ending of one call, an interruption from the cluster's side too (its owner
            // stopping mid-way), leaves that conversation to the next check, not the rest of the page.
            Effect.exit,
            Effect.map((result) => {
              if (Exit.isSuccess(result) && result.value.changed) closed++
            }),
            Effect.zipLeft(Effect.sleep(spacing), { concurrent: true })
          ), { discard: true }).pipe(
            // However the page ends: a sweep cut short (its node stopping, the singleton moving)
            // still says what it did.
            Effect.ensuring(Effect.suspend(() =>
              closed > 0 ? Effect.logInfo("idle conversations closed").pipe(Effect.annotateLogs("count", closed)) : Effect.void
            ))
          )
      })
    const cutoffMs = Date.now() - idleCloseSeconds * 1000
    const cutoff = new Date(cutoffMs).toISOString()
    // The index holds the minute of `updated_at` (migration 0003); the exact time is checked after.
    const cutoffMinute = Math.floor(cutoffMs / 60_000)
    // Each page starts after the last one: a conversation whose close failed is left to the next
    // check, and a page of such conversations cannot hold back the idle ones behind it.
    let after = { minute: Number.MIN_SAFE_INTEGER, id: "00000000-0000-0000-0000-000000000000" }
    while (true) {
      const idle = yield* sql<{ id: string; tenant_id: TenantId; activity_minute: string }>`
        SELECT id, tenant_id, activity_minute FROM conversations
        WHERE status = 'active' AND activity_minute <= ${cutoffMinute} AND updated_at < ${cutoff}
          AND activity_minute >= ${after.minute} AND (activity_minute, id) > (${after.minute}, ${after.id}::uuid)
        ORDER BY activity_minute, id LIMIT ${page}`
      yield* closePage(idle, cutoff)
      const last = idle[idle.length - 1]
      if (idle.length < page || last === undefined) break
      after = { minute: Number(last.activity_minute), id: last.id }
    }
  })

/**
 * Inactivity auto-close: every `CONVERSATION_EXPIRY_CHECK_SECONDS`, exactly one node in the cluster
 * (a cluster singleton) closes the conversations idle for `CONVERSATION_IDLE_CLOSE_SECONDS`.
 */
export const ConversationExpiryLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    Singleton.make(
      "conversation-expiry",
      // A loop of the singleton's scope: it stops when the singleton moves, and readiness sees it
      // on the node that runs it.
      Effect.flatMap(JobRunner, (jobs) =>
        jobs.every(
          "close_idle_conversations",
          Duration.seconds(config.conversationExpiryCheckSeconds),
          closeIdleConversations(config.conversationIdleCloseSeconds, config.conversationExpiryClosesPerSecond)
        ))
    ))
)
