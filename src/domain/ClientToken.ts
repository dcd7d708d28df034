import { Schema } from "effect"

/** The claims of a client token: client-api.md "Token claims" plus those of CONTRACT.md §2. */
export const ClientTokenClaims = Schema.Struct({
  /** The end user; always equal to `user_id`. */
  sub: Schema.String,
  user_id: Schema.String,
  /** Present on conversation-bound tokens. */
  conversation_id: Schema.optional(Schema.UUID),
  /** Tenant. */
  tid: Schema.UUID,
  /** Channel. */
  cid: Schema.UUID,
  /** Family: shared by every token generated, derived or refreshed in one chain (revocation). */
  fam: Schema.UUID,
  jti: Schema.UUID,
  /** Issued at and expiry, Unix seconds. */
  iat: Schema.Int,
  exp: Schema.Int,
  scope: Schema.optional(Schema.Literal("channel")),
  /** Restriction to a subset of permissions; absent means all of them. */
  perms: Schema.optional(Schema.Array(Schema.Literal("read", "write", "typing"))),
  src: Schema.optional(Schema.Literal("publishable"))
})
export type ClientTokenClaims = typeof ClientTokenClaims.Type

/** What the issuer of a token decides; the signer adds `sub`, `jti`, `iat` and `exp`. */
export type ClientTokenGrant = Omit<ClientTokenClaims, "sub" | "jti" | "iat" | "exp">
