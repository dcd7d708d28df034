import { SqlClient } from "@effect/sql"
import { Effect, PubSub, Schema, Stream } from "effect"
import { orUnavailable } from "../db/SqlFailure.js"
import { databaseUnavailable } from "../domain/ApiError.js"
import type { ClientTokenClaims } from "../domain/ClientToken.js"
import { failureLog } from "../ops/FailureLog.js"
import { JobRunner } from "../ops/JobRunner.js"

/**
 * One revocation: a family, one rotated token (from `atMs`), or a user's tokens on a channel issued up
 * to `atMs`; `expiresAtMs` is when every token it covers has expired.
 */
export const Revocation = Schema.Struct({
  kind: Schema.Literal("family", "rotation", "user"),
  tenantId: Schema.String,
  channelId: Schema.String,
  /** The family id, the rotated token's `jti`, or the user id. */
  subject: Schema.String,
  atMs: Schema.Number,
  expiresAtMs: Schema.Number
})
export type Revocation = typeof Revocation.Type

const RevocationRow = Schema.Struct({
  id: Schema.NumberFromString,
  kind: Revocation.fields.kind,
  tenant_id: Schema.String,
  channel_id: Schema.String,
  subject: Schema.String,
  at_ms: Schema.NumberFromString,
  expires_at_ms: Schema.NumberFromString
})
const decodeRows = Schema.decodeUnknown(Schema.Array(RevocationRow))

/** How often a node reads the log: well inside the one-second promise of client-api.md. */
export const POLL_INTERVAL_MS = 250
/** Most rows one read takes; a longer backlog is read over the next polls. */
const POLL_BATCH = 1000
/**
 * An id skipped by the log (a revocation committed after a later one, or rolled back) is asked for
 * again this long; a transaction open longer than the statement timeout never commits.
 */
const GAP_WAIT_MS = 30_000
const GAPS_MAX = 10_000
/** A node that has not read the log for this long refuses client tokens (503) rather than trust a stale view. */
const STALE_AFTER_MS = 5_000
/** Revocations a slow subscriber of `changes` may lag behind before the oldest are dropped. */
const SUBSCRIBER_BACKLOG = 10_000

const userKey = (channelId: string, userId: string) => `${channelId} ${userId}`

/** Whether `revocation` covers a token with these claims at `nowMs`. */
export const covers = (revocation: Revocation, claims: ClientTokenClaims, nowMs: number): boolean => {
  if (claims.cid !== revocation.channelId) return false
  switch (revocation.kind) {
    case "family":
      return claims.fam === revocation.subject
    case "rotation":
      return claims.jti === revocation.subject && nowMs >= revocation.atMs
    case "user":
      return claims.user_id === revocation.subject && claims.iat <= Math.floor(revocation.atMs / 1000)
  }
}

/**
 * Client-token revocations: a log every node follows, so a check reads no database (ADR 0025); each one
 * learnt is published on `changes` so sockets close.
 */
export class TokenRevocations extends Effect.Service<TokenRevocations>()("parley/TokenRevocations", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const jobs = yield* JobRunner
    const families = new Map<string, Revocation>()
    const rotations = new Map<string, Revocation>()
    const users = new Map<string, Revocation>()
    const pubsub = yield* PubSub.sliding<Revocation>(SUBSCRIBER_BACKLOG)
    yield* Effect.addFinalizer(() => PubSub.shutdown(pubsub))
    let maxId = 0
    const gaps = new Map<number, number>()
    let readAt = Date.now()

    /** Takes a revocation in; false when it adds nothing to what the node knew. */
    const apply = (r: Revocation): boolean => {
      if (r.expiresAtMs <= Date.now()) return false
      const [map, key] = r.kind === "family"
        ? [families, r.subject]
        : r.kind === "rotation"
        ? [rotations, r.subject]
        : [users, userKey(r.channelId, r.subject)]
      const known = map.get(key)
      // A later user cut-off covers more; another family or rotation record adds nothing.
      if (known !== undefined && (r.kind !== "user" || known.atMs >= r.atMs)) return false
      map.set(key, r)
      return true
    }

    const learn = (r: Revocation) => (apply(r) ? PubSub.publish(pubsub, r) : Effect.succeed(false))

    const toRevocation = (row: typeof RevocationRow.Type): Revocation => ({
      kind: row.kind,
      tenantId: row.tenant_id,
      channelId: row.channel_id,
      subject: row.subject,
      atMs: row.at_ms,
      expiresAtMs: row.expires_at_ms
    })

    const COLUMNS = sql`id, kind, tenant_id, channel_id, subject, at_ms, expires_at_ms`

    /** Reads what was logged since the last read (and the ids skipped then), in id order. */
    const poll = Effect.gen(function*() {
      const rows = yield* sql`
        SELECT ${COLUMNS} FROM client_token_revocations
        WHERE id > ${maxId} OR id = ANY(${[...gaps.keys()]}::int8[])
        ORDER BY id LIMIT ${POLL_BATCH}`.pipe(Effect.flatMap(decodeRows))
      const now = Date.now()
      for (const row of rows) {
        gaps.delete(row.id)
        if (row.id > maxId) {
          for (let skipped = Math.max(maxId + 1, row.id - GAPS_MAX); skipped < row.id; skipped++) gaps.set(skipped, now)
          maxId = row.id
        }
      }
      for (const [id, noticedAt] of gaps) if (now - noticedAt > GAP_WAIT_MS || gaps.size > GAPS_MAX) gaps.delete(id)
      yield* Effect.forEach(rows, (row) => learn(toRevocation(row)), { discard: true })
      readAt = now
    })

    /** Forgets revocations whose tokens have all expired; linear in what is kept. */
    const forgetExpired = Effect.sync(() => {
      const now = Date.now()
      for (const map of [families, rotations, users]) {
        for (const [key, r] of map) if (r.expiresAtMs <= now) map.delete(key)
      }
    })

    // Everything still in force, before the node serves; later rows come by polling.
    const [{ max }] = yield* sql<{ max: string }>`SELECT coalesce(max(id), 0)::text AS max FROM client_token_revocations`
    const live = yield* sql`
      SELECT ${COLUMNS} FROM client_token_revocations
      WHERE id <= ${max} AND expires_at_ms > ${Date.now()}`.pipe(Effect.flatMap(decodeRows))
    for (const row of live) apply(toRevocation(row))
    maxId = Number(max)

    const pollLog = failureLog("token revocations could not be read", "token revocations can be read again")
    yield* jobs.every(
      "follow_token_revocations",
      `${POLL_INTERVAL_MS} millis`,
      poll.pipe(Effect.matchCauseEffect({ onFailure: pollLog.failed, onSuccess: () => pollLog.succeeded })),
      { fixedRate: true }
    )
    yield* jobs.every("forget_expired_token_revocations", "10 seconds", forgetExpired)
    yield* jobs.every(
      "prune_token_revocations",
      "1 minute",
      Effect.suspend(() => {
        // Kept a minute past expiry, for nodes whose clocks run behind.
        const before = Date.now() - 60_000
        return sql`DELETE FROM client_token_revocations WHERE expires_at_ms < ${before}`.pipe(
          Effect.zipRight(sql`DELETE FROM client_token_rotations WHERE expires_at_ms < ${before}`)
        )
      })
    )

    /**
     * Why a token with these claims is no longer valid, if it is not: in memory, no database read.
     * 503 while this node has not been able to read the log for a while.
     */
    const check = (claims: ClientTokenClaims) =>
      Effect.suspend(() => {
        const now = Date.now()
        if (now - readAt > STALE_AFTER_MS) return Effect.fail(databaseUnavailable())
        const user = claims.user_id === undefined ? undefined : users.get(userKey(claims.cid, claims.user_id))
        const found = [families.get(claims.fam), rotations.get(claims.jti), user].find((r) =>
          r !== undefined && covers(r, claims, now)
        )
        return Effect.succeed(found?.kind)
      })

    /** Logs a revocation (every node learns of it within a poll) and applies it here at once. */
    const record = (revocation: Revocation) =>
      sql`
        INSERT INTO client_token_revocations (kind, tenant_id, channel_id, subject, at_ms, expires_at_ms)
        VALUES (${revocation.kind}, ${revocation.tenantId}, ${revocation.channelId}, ${revocation.subject},
                ${revocation.atMs}, ${revocation.expiresAtMs})`.pipe(
        orUnavailable,
        Effect.zipRight(learn(revocation)),
        Effect.asVoid
      )

    /** Every revocation this node learns of from now on, once each (its own and other nodes'). */
    const changes: Stream.Stream<Revocation> = Stream.fromPubSub(pubsub)

    return { check, record, changes } as const
  })
}) {}
