import { Schema } from "effect"
import { ChannelId } from "./Channel.js"
import { ConversationId } from "./Conversation.js"
import { TenantId } from "./Tenant.js"

/** What a client token may do (client-api.md "Permissions"). */
export const Permission = Schema.Literal("read", "write", "typing")
export type Permission = typeof Permission.Type

/** Every permission: a token without `perms` holds all of them. */
export const allPermissions: ReadonlyArray<Permission> = Permission.literals

/** The claims of a client token: client-api.md "Token claims" plus those of CONTRACT.md §2. */
export const ClientTokenClaims = Schema.Struct({
  /** The end user; always equal to `user_id`, absent with it. */
  sub: Schema.optional(Schema.String),
  user_id: Schema.optional(Schema.String),
  /** Present on conversation-bound tokens. */
  conversation_id: Schema.optional(ConversationId),
  /** Tenant. */
  tid: TenantId,
  /** Channel. */
  cid: ChannelId,
  /** Family: shared by every token generated, derived or refreshed in one chain (revocation). */
  fam: Schema.UUID,
  jti: Schema.UUID,
  /** Issued at and expiry, Unix seconds. */
  iat: Schema.Int,
  exp: Schema.Int,
  scope: Schema.optional(Schema.Literal("channel")),
  /** Restriction to a subset of permissions; absent means all of them. */
  perms: Schema.optional(Schema.Array(Permission)),
  src: Schema.optional(Schema.Literal("publishable"))
})
export type ClientTokenClaims = typeof ClientTokenClaims.Type

/** What the issuer of a token decides; the signer adds `sub`, `jti`, `iat` and `exp`. */
export type ClientTokenGrant = Omit<ClientTokenClaims, "sub" | "jti" | "iat" | "exp">

/**
 * The claims of a publishable `resume` value: the conversation and anonymous user it resumes.
 * Signed like a token but with a header type of its own, so neither passes for the other.
 */
export const ResumeClaims = Schema.Struct({
  tid: TenantId,
  cid: ChannelId,
  conversation_id: ConversationId,
  user_id: Schema.String,
  exp: Schema.Int
})
export type ResumeClaims = typeof ResumeClaims.Type
