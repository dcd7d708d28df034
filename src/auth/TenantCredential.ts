import { Effect } from "effect"
import { InsufficientScope } from "../domain/ApiError.js"
import type { Scope } from "../domain/ApiKey.js"
import type { ChannelId } from "../domain/Channel.js"
import type { TenantId } from "../domain/Tenant.js"
import type { Actor } from "./Actor.js"

/** The tenant credential a request was authenticated with. */
export interface TenantCredential {
  readonly tenantId: TenantId
  /** The API key of the request; null for a channel token. */
  readonly keyId: string | null
  readonly scopes: ReadonlyArray<Scope>
  /** The audit actor: `tenant_api` with the key id (the tenant id for the primary key). */
  readonly actor: Actor
  /** Set when the request came with a (deprecated) channel token: it reaches only that channel. */
  readonly channelId: ChannelId | null
}

/** `effect`, or 403 `insufficient_scope` unless the credential holds `scope`. */
export const withScope = <A, E, R>(
  credential: TenantCredential,
  scope: Scope,
  effect: Effect.Effect<A, E, R>
): Effect.Effect<A, E | InsufficientScope, R> =>
  credential.scopes.includes(scope)
    ? effect
    : Effect.fail(new InsufficientScope({ message: `this key lacks the ${scope} scope`, required: [scope] }))
