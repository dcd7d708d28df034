import { Context, Effect } from "effect"
import { Forbidden, InsufficientPermission, NotFound } from "../domain/ApiError.js"
import type { ChannelId } from "../domain/Channel.js"
import { allPermissions, type ClientTokenClaims, type Permission } from "../domain/ClientToken.js"
import type { ConversationId } from "../domain/Conversation.js"
import type { TenantId } from "../domain/Tenant.js"
import type { ConversationScope } from "../conversations/Conversations.js"

/** The three kinds of client-api.md "Token kinds". */
export type ClientTokenKind = "unscoped" | "channel" | "conversation"

/** Who a valid client token speaks for, and what it may do. */
export interface ClientPrincipal {
  readonly tenantId: TenantId
  readonly channelId: ChannelId
  /** The conversation of a conversation-bound token. */
  readonly conversationId: ConversationId | null
  readonly userId: string | null
  readonly permissions: ReadonlyArray<Permission>
  readonly kind: ClientTokenKind
  readonly source: "publishable" | null
  /** The verified claims, from which derived and refreshed tokens are made. */
  readonly claims: ClientTokenClaims
}

/** The client token of the current request (set by `ClientAuth`). */
export class CurrentClient extends Context.Tag("parley/CurrentClient")<CurrentClient, ClientPrincipal>() {}

/** The principal of verified claims. */
export const principalOf = (claims: ClientTokenClaims): ClientPrincipal => ({
  tenantId: claims.tid,
  channelId: claims.cid,
  conversationId: claims.conversation_id ?? null,
  userId: claims.user_id ?? null,
  permissions: claims.perms ?? allPermissions,
  kind: claims.conversation_id !== undefined ? "conversation" : claims.scope === "channel" ? "channel" : "unscoped",
  source: claims.src ?? null,
  claims
})

/** 403 `insufficient_permission` (`details.required`) unless the client holds `permission`. */
export const requirePermission = (permission: Permission) =>
  Effect.flatMap(CurrentClient, (client) =>
    client.permissions.includes(permission)
      ? Effect.succeed(client)
      : Effect.fail(new InsufficientPermission({ message: `this token lacks the ${permission} permission`, required: [permission] })))

/**
 * The "Token kinds" rule before a conversation is looked up: a conversation-bound token may name
 * only its own conversation (403 `forbidden` for any other id, existing or not).
 */
export const requireConversationBinding = (conversationId: string) =>
  Effect.flatMap(CurrentClient, (client) =>
    client.conversationId === null || client.conversationId === conversationId
      ? Effect.succeed(client)
      : Effect.fail(new Forbidden({ message: "this token is bound to another conversation" })))

/**
 * The rule once the conversation is found: a conversation of another tenant or channel is 404
 * `not_found`, as an unknown one (its existence is not revealed).
 */
export const requireOwnChannel = (conversation: { readonly id: string; readonly tenant_id: string; readonly channel_id: string }) =>
  Effect.flatMap(CurrentClient, (client) =>
    conversation.tenant_id === client.tenantId && conversation.channel_id === client.channelId
      ? Effect.succeed(client)
      : Effect.fail(new NotFound({ message: `conversation ${conversation.id} not found` })))

/**
 * What a client reaches on a socket: its channel's conversations, and for a channel-scoped token (an
 * agent) also those routed to its channel (client-api.md "Token kinds").
 */
export const socketScopeOf = (client: ClientPrincipal): ConversationScope => ({
  tenantId: client.tenantId,
  channelId: client.channelId,
  routedToo: client.kind === "channel"
})

/** Listing the channel's conversations: a channel-scoped token only (403 `forbidden` for the others). */
export const requireChannelScope = Effect.flatMap(CurrentClient, (client) =>
  client.kind === "channel"
    ? Effect.succeed(client)
    : Effect.fail(new Forbidden({ message: "listing conversations needs a channel-scoped token" })))
