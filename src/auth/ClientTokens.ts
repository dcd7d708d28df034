import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { PublishableKeys } from "../channels/PublishableKeys.js"
import { AppConfig } from "../config/AppConfig.js"
import { Conversations } from "../conversations/Conversations.js"
import { orUnavailable } from "../db/SqlFailure.js"
import {
  CredentialChannelInactive,
  Forbidden,
  OriginNotAllowed,
  TokenRevoked,
  Unauthorized
} from "../domain/ApiError.js"
import type { ChannelId } from "../domain/Channel.js"
import type { ConversationId } from "../domain/Conversation.js"
import type { ClientTokenClaims, ClientTokenGrant, Permission } from "../domain/ClientToken.js"
import { normalizeOrigin } from "../domain/PublishableKey.js"
import { RateLimiter } from "../ratelimit/RateLimiter.js"
import { type ClientPrincipal, principalOf } from "./ClientAccess.js"
import type { ChannelOfSecret } from "./ChannelTokens.js"
import type { TenantId } from "../domain/Tenant.js"
import { makeRecentAnswers } from "./RecentAnswers.js"
import { TokenRevocations } from "./TokenRevocations.js"
import { TokenSigner } from "./TokenSigner.js"

/** A token just issued and the seconds it has left (`expires_in`). */
export interface IssuedToken {
  readonly token: string
  readonly expiresIn: number
}

/** What `tokens/generate` may ask for; permissions already checked to be a non-empty set. */
export interface GenerateRequest {
  readonly userId?: string | undefined
  readonly scope?: "channel" | undefined
  readonly permissions?: ReadonlyArray<Permission> | undefined
}

const ChannelState = Schema.Struct({ status: Schema.String, tenant_status: Schema.String })

/** How long a node trusts a channel's status it read: a deactivation is in force on every node within it. */
const CHANNEL_STATUS_MAX_AGE_MS = 1000
/** Channels whose status a node remembers at the most (the least recently used goes first). */
const MAX_REMEMBERED_CHANNELS = 10_000

const revoked = () => new TokenRevoked({ message: "the token has been revoked" })

const invalidKey = () => Effect.fail(new Unauthorized({ message: "invalid publishable key" }))

/** A publishable token's anonymous user: chosen by the server, never by the caller. */
const anonymousUserId = () => `anon-${crypto.randomUUID()}`

/**
 * Issues, checks, rotates and revokes client tokens (client-api.md "Authentication", "Token kinds",
 * the token routes): every client-token rule lives here, the legacy `POST /api/v1/tokens` included.
 */
export class ClientTokens extends Effect.Service<ClientTokens>()("parley/ClientTokens", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig
    const signer = yield* TokenSigner
    const revocations = yield* TokenRevocations
    const limiter = yield* RateLimiter
    const conversations = yield* Conversations
    const publishableKeys = yield* PublishableKeys
    // A revocation must outlive every token it covers, whichever route issued it.
    const longestTtlMs = Math.max(config.tokenTtlSeconds, config.legacyTokenTtlSeconds) * 1000

    const channelState = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: Schema.String, channelId: Schema.String }),
      Result: ChannelState,
      execute: ({ channelId, tenantId }) =>
        sql`SELECT c.status, t.status AS tenant_status FROM channels c JOIN tenants t ON t.id = c.tenant_id
            WHERE c.id = ${channelId} AND c.tenant_id = ${tenantId}`
    })

    // Read once a second per channel, not on every request (docs/api-notes.md "Client API").
    const channelStatuses = makeRecentAnswers<Option.Option<typeof ChannelState.Type>>({
      maxEntries: MAX_REMEMBERED_CHANNELS,
      maxAgeMs: CHANNEL_STATUS_MAX_AGE_MS
    })

    const statusOf = (claims: ClientTokenClaims) =>
      Effect.suspend(() => {
        const key = `${claims.tid}/${claims.cid}`
        const startedAt = performance.now()
        const remembered = channelStatuses.get(key, startedAt)
        return remembered !== undefined ? Effect.succeed(remembered) : channelState({ tenantId: claims.tid, channelId: claims.cid }).pipe(
          orUnavailable,
          Effect.tap((state) => Effect.sync(() => channelStatuses.remember(key, state, startedAt)))
        )
      })

    /** 401 when the token's channel or tenant is gone or inactive, 403 `channel_inactive` for its disabled channel. */
    const requireUsableChannel = (claims: ClientTokenClaims) =>
      Effect.flatMap(statusOf(claims), (state): Effect.Effect<void, Unauthorized | CredentialChannelInactive> =>
        Option.isNone(state)
          ? Effect.fail(new Unauthorized({ message: "the channel of this token no longer exists" }))
          : state.value.tenant_status !== "active"
          ? Effect.fail(new Unauthorized({ message: "the tenant of this token is inactive" }))
          : state.value.status !== "active"
          ? Effect.fail(new CredentialChannelInactive({ message: "the channel of this token is inactive" }))
          : Effect.void)

    const issue = (grant: ClientTokenGrant, ttlSeconds: number, notAfter?: number) =>
      Effect.map(signer.sign(grant, ttlSeconds, notAfter), (token): IssuedToken => {
        const now = Math.floor(Date.now() / 1000)
        const exp = Math.min(now + ttlSeconds, notAfter ?? Infinity)
        return { token, expiresIn: Math.max(0, exp - now) }
      })

    /** The claims of a token that is signed, unexpired, not revoked, on an active channel. */
    const authenticate = (token: string) =>
      Effect.gen(function*() {
        const claims = yield* signer.verify(token)
        if ((yield* revocations.check(claims)) !== undefined) return yield* revoked()
        yield* requireUsableChannel(claims)
        return principalOf(claims)
      })

    /** Counts a request made with the channel's secret in its `token_generate` bucket. */
    const limitChannel = (channel: ChannelOfSecret) => limiter.consume("token_generate", channel.id, channel.tenant_id)

    /** `tokens/generate`: an unscoped or channel-scoped token of the secret's channel, in a new family. */
    const generate = (channel: ChannelOfSecret, request: GenerateRequest) =>
      Effect.gen(function*() {
        yield* limitChannel(channel)
        return yield* issue({
          tid: channel.tenant_id,
          cid: channel.id,
          fam: crypto.randomUUID(),
          ...(request.userId === undefined ? {} : { user_id: request.userId }),
          ...(request.scope === undefined ? {} : { scope: request.scope }),
          ...(request.permissions === undefined ? {} : { perms: request.permissions })
        }, config.tokenTtlSeconds)
      })

    /**
     * A conversation-bound token derived from `parent` (create, reconnect): same family, user,
     * source and permissions, no channel scope, and never valid past the parent's expiry.
     */
    const derive = (parent: ClientPrincipal, conversationId: ConversationId) => {
      const { conversation_id: _bound, exp, iat: _iat, jti: _jti, scope: _scope, sub: _sub, ...kept } = parent.claims
      return issue({ ...kept, conversation_id: conversationId }, config.tokenTtlSeconds, exp)
    }

    /** The legacy `POST /api/v1/tokens` token: conversation-bound, a family of its own, `LEGACY_TOKEN_TTL_SECONDS`. */
    const legacy = (channel: ChannelOfSecret, conversationId: ConversationId, userId: string) =>
      issue(
        { user_id: userId, conversation_id: conversationId, tid: channel.tenant_id, cid: channel.id, fam: crypto.randomUUID() },
        config.legacyTokenTtlSeconds
      )

    const revokeFamily = (claims: ClientTokenClaims) =>
      revocations.record({
        kind: "family",
        tenantId: claims.tid,
        channelId: claims.cid,
        subject: claims.fam,
        atMs: Date.now(),
        expiresAtMs: Date.now() + longestTtlMs
      })

    /**
     * Marks the token rotated unless it already is; when it was rotated before, when that was.
     * The first refresh of a token wins; concurrent ones see its time.
     */
    const rotate = (claims: ClientTokenClaims, nowMs: number) =>
      Effect.gen(function*() {
        const inserted = yield* sql<{ rotated_at_ms: string }>`
          INSERT INTO client_token_rotations (jti, rotated_at_ms, expires_at_ms)
          VALUES (${claims.jti}, ${nowMs}, ${claims.exp * 1000})
          ON CONFLICT (jti) DO NOTHING RETURNING rotated_at_ms`
        if (inserted.length > 0) return Option.none<number>()
        const [earlier] = yield* sql<{ rotated_at_ms: string }>`
          SELECT rotated_at_ms FROM client_token_rotations WHERE jti = ${claims.jti}`
        return Option.some(Number(earlier?.rotated_at_ms ?? nowMs))
      }).pipe(orUnavailable)

    /**
     * `tokens/refresh`: a new token of the same grant. The old one keeps working for the rotation grace;
     * refreshing it after that is taken for theft and revokes the whole family (401 `token_revoked`).
     */
    const refresh = (token: string) =>
      Effect.gen(function*() {
        const claims = yield* signer.verify(token)
        const reason = yield* revocations.check(claims)
        // A rotated token past its grace is handled below, where it revokes its family.
        if (reason !== undefined && reason !== "rotation") return yield* revoked()
        yield* requireUsableChannel(claims)
        yield* limiter.consume(claims.src === "publishable" ? "publishable_token" : "token_generate", claims.cid, claims.tid)
        const now = Date.now()
        const rotatedAt = yield* rotate(claims, now)
        const graceMs = config.tokenRotationGraceSeconds * 1000
        if (Option.isSome(rotatedAt) && now >= rotatedAt.value + graceMs) {
          yield* revokeFamily(claims)
          return yield* revoked()
        }
        if (Option.isNone(rotatedAt)) {
          yield* revocations.record({
            kind: "rotation",
            tenantId: claims.tid,
            channelId: claims.cid,
            subject: claims.jti,
            atMs: now + graceMs,
            expiresAtMs: claims.exp * 1000
          })
        }
        const { exp: _exp, iat: _iat, jti: _jti, sub: _sub, ...grant } = claims
        const issued = yield* issue(grant, config.tokenTtlSeconds)
        return { ...issued, conversationId: claims.conversation_id ?? null }
      })

    /** `tokens/revoke` with the token itself: its family (logout). */
    const revokeOwn = (token: string) => Effect.flatMap(authenticate(token), (client) => revokeFamily(client.claims))

    /**
     * `tokens/revoke` with the channel secret and `{token}`: its family. A token that does not
     * verify (invalid, expired) needs nothing revoking; one of another channel is 403.
     */
    const revokeForChannel = (channel: ChannelOfSecret, token: string) =>
      Effect.gen(function*() {
        const claims = yield* signer.verify(token).pipe(
          Effect.map(Option.some),
          Effect.catchTags({ Unauthorized: () => Effect.succeedNone, TokenExpired: () => Effect.succeedNone })
        )
        if (Option.isNone(claims)) return
        if (claims.value.cid !== channel.id) return yield* new Forbidden({ message: "the token belongs to another channel" })
        yield* revokeFamily(claims.value)
      })

    /** `tokens/revoke` with the channel secret and `{user: {id}}`: the user's tokens on the channel issued until now. */
    const revokeUser = (channel: ChannelOfSecret, userId: string) =>
      Effect.suspend(() =>
        revocations.record({
          kind: "user",
          tenantId: channel.tenant_id,
          channelId: channel.id,
          subject: userId,
          atMs: Date.now(),
          expiresAtMs: Date.now() + longestTtlMs
        })
      )

    /**
     * `tokens/publishable`: IP bucket, key (401), origin (403), channel bucket. A valid `resume` of an active
     * conversation gives a fresh token for it, anything else a new conversation and anonymous user.
     */
    const publishable = (request: {
      readonly key: string
      readonly origin: string | undefined
      readonly clientAddress: string
      readonly resume: string | undefined
    }) =>
      Effect.gen(function*() {
        yield* limiter.consume("publishable_token_ip", request.clientAddress, null)
        const key = yield* publishableKeys.authenticate(request.key).pipe(
          Effect.flatMap(Option.match({
            onNone: invalidKey,
            onSome: Effect.succeed
          }))
        )
        const origin = Option.flatMap(Option.fromNullable(request.origin), normalizeOrigin)
        if (Option.isNone(origin) || !key.allowed_origins.includes(origin.value)) {
          return yield* new OriginNotAllowed({ message: "the Origin is not among the key's allowed origins" })
        }
        yield* limiter.consume("publishable_token", key.channel_id, key.tenant_id)
        const resumed = yield* resumable(key, request.resume)
        const anonymous = anonymousUserId()
        const { conversationId, userId } = Option.isSome(resumed) ? resumed.value : yield* conversations.create({
          tenantId: key.tenant_id,
          channelId: key.channel_id,
          status: "active",
          metadata: {},
          participant: anonymous
        }).pipe(
          Effect.map((conversation) => ({ conversationId: conversation.id, userId: anonymous })),
          // The channel was disabled or deleted after the key was checked: what the key gets now.
          Effect.catchTags({ ChannelInactive: invalidKey, NotFound: invalidKey })
        )
        const issued = yield* issue({
          tid: key.tenant_id,
          cid: key.channel_id,
          fam: crypto.randomUUID(),
          conversation_id: conversationId,
          user_id: userId,
          src: "publishable"
        }, config.tokenTtlSeconds)
        const resume = yield* signer.signResume(
          { tid: key.tenant_id, cid: key.channel_id, conversation_id: conversationId, user_id: userId },
          config.publishableResumeTtlSeconds
        )
        return { ...issued, conversationId, userId, resume, resumed: Option.isSome(resumed) }
      })

    /** The conversation and user a `resume` value names, when it is ours, unexpired, of this channel, and its conversation is active. */
    const resumable = (key: { readonly tenant_id: TenantId; readonly channel_id: ChannelId }, resume: string | undefined) =>
      resume === undefined ? Effect.succeedNone : signer.verifyResume(resume).pipe(
        Effect.flatMap(Option.match({
          onNone: () => Effect.succeedNone,
          onSome: (claims) =>
            claims.tid !== key.tenant_id || claims.cid !== key.channel_id
              ? Effect.succeedNone
              : conversations.get({ tenantId: key.tenant_id, channelId: key.channel_id }, claims.conversation_id, { channels: false }).pipe(
                Effect.map((conversation) =>
                  conversation.status === "active"
                    ? Option.some({ conversationId: conversation.id, userId: claims.user_id })
                    : Option.none()
                ),
                // Deleted since: a new conversation, as for any resume that no longer applies.
                Effect.catchTag("NotFound", () => Effect.succeedNone)
              )
        }))
      )

    return { authenticate, requireUsableChannel, limitChannel, generate, derive, legacy, refresh, revokeOwn, revokeForChannel, revokeUser, publishable } as const
  })
}) {}
