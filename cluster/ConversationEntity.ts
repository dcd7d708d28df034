import { Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Schema } from "effect"
import { Activity, ActivityDraft } from "../src/domain/Activity.js"
import { WriteOutcomeUnknown } from "../src/conversations/ConversationOwners.js"
import { ConversationClosed, InvalidMessage, NotFound, Unauthorized, Unavailable } from "../src/domain/ApiError.js"
import { TenantId } from "../src/domain/Tenant.js"

/** Appends one activity; re-sending the same draft id or idempotency key returns the stored one. */
const Append = Rpc.make("Append", {
  payload: {
    tenantId: TenantId,
    draft: ActivityDraft,
    // `deadline` (epoch ms): past it the entity no longer writes, so a caller that gave up and
    // answered 503 can trust that nothing was stored.
    deadline: Schema.Number,
    // An API key id the write checks is still valid, for a caller that did not look it up itself
    // (401 if it is not: ADR 0015). Optional: a node of an earlier build sends none.
    keyCheck: Schema.optional(Schema.NullOr(Schema.UUID))
  },
  success: Activity,
  // InvalidMessage: an edit or reaction of a message deleted after its target was looked at.
  error: Schema.Union(NotFound, ConversationClosed, InvalidMessage, Unavailable, WriteOutcomeUnknown, Unauthorized)
})

/**
 * Closes or reopens. A real transition appends a `conversationUpdate` from `system`; otherwise
 * nothing changes. `idleSince` makes a close conditional: only if nothing happened after it.
 */
const SetStatus = Rpc.make("SetStatus", {
  payload: {
    tenantId: TenantId,
    status: Schema.Literal("active", "closed"),
    reason: Schema.Literal("manual", "expired"),
    idleSince: Schema.NullOr(Schema.String),
    // As for `Append`: past it the entity no longer writes the change.
    deadline: Schema.Number
  },
  success: Schema.Struct({ changed: Schema.Boolean }),
  error: Schema.Union(NotFound, Unavailable, WriteOutcomeUnknown)
})

/** Every activity with seq above `fromSeq`: stored ones first, then live ones, in seq order. */
const Subscribe = Rpc.make("Subscribe", {
  payload: { fromSeq: Schema.NonNegativeInt },
  success: Activity,
  error: Unavailable,
  stream: true
})

/** One entity per conversation (entity id = conversation id): it owns the head seq and the fan-out. */
export const ConversationEntity = Entity.make("Conversation", [Append, SetStatus, Subscribe])
