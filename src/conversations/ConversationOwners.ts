import type { ClusterError } from "@effect/cluster"
import { Context, type Effect, Schema, type Stream } from "effect"
import type { Activity, ActivityDraft } from "../domain/Activity.js"
import type { ConversationClosed, InvalidMessage, NotFound, Unauthorized, Unavailable } from "../domain/ApiError.js"
import type { ConversationId } from "../domain/Conversation.js"
import type { TenantId } from "../domain/Tenant.js"

/**
 * The write's outcome is open (its connection broke after sending it): the caller looks it up once
 * settled (WriteTimings), never answering 503 for a stored change.
 */
export class WriteOutcomeUnknown extends Schema.TaggedError<WriteOutcomeUnknown>()("WriteOutcomeUnknown", {}) {}

/** An append as a conversation's owner takes it. */
export interface AppendRequest {
  readonly tenantId: TenantId
  readonly draft: ActivityDraft
  /** Epoch ms: past it the owner no longer writes, so a caller that answered 503 can trust nothing was stored. */
  readonly deadline: number
  /** An API key id the write finds valid before it stores the draft (ADR 0015); 401 if not. */
  readonly keyCheck?: string | null | undefined
}

/** A close or reopen as a conversation's owner takes it; `idleSince` makes a close conditional on nothing newer. */
export interface StatusRequest {
  readonly tenantId: TenantId
  readonly status: "active" | "closed"
  readonly reason: "manual" | "expired"
  readonly idleSince: string | null
  readonly deadline: number
}

/** The owner did not take the message, or its answer was lost on the way (the cluster's own failures). */
export type OwnerUnreached = ClusterError.MailboxFull | ClusterError.AlreadyProcessingMessage | ClusterError.PersistenceError

/**
 * The node owning each conversation, wherever it runs: what `src/` sends to a conversation's core
 * through the cluster. Implemented in `cluster/` by the conversation entity's client.
 */
export class ConversationOwners extends Context.Tag("parley/ConversationOwners")<ConversationOwners, {
  readonly append: (
    conversationId: ConversationId,
    request: AppendRequest
  ) => Effect.Effect<
    Activity,
    NotFound | ConversationClosed | InvalidMessage | Unavailable | WriteOutcomeUnknown | Unauthorized | OwnerUnreached
  >
  readonly setStatus: (
    conversationId: ConversationId,
    request: StatusRequest
  ) => Effect.Effect<{ readonly changed: boolean }, NotFound | Unavailable | WriteOutcomeUnknown | OwnerUnreached>
  /** Every activity above `fromSeq`: stored ones first, then live ones, in seq order. */
  readonly subscribe: (conversationId: ConversationId, fromSeq: number) => Stream.Stream<Activity, Unavailable | OwnerUnreached>
}>() {}
