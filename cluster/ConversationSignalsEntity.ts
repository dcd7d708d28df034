import { Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Schema } from "effect"

/** The longest user id or connection id a signal carries (they come from tokens and our own ids); nodes check it. */
export const MAX_ID_LENGTH = 1024
/** The most viewers one node reports for one conversation; nodes report the first ones (sorted). */
export const MAX_REPORTED_VIEWERS = 10_000
const Id = Schema.String.pipe(Schema.maxLength(MAX_ID_LENGTH))

const Typing = Schema.TaggedStruct("Typing", { userId: Id, origin: Id })
const Read = Schema.TaggedStruct("Read", { userId: Id, seq: Schema.NonNegativeInt, origin: Id })
const Presence = Schema.TaggedStruct("Presence", { viewers: Schema.Array(Id) })

/** A `Signal` (src/realtime/ConversationSignals.ts) as it crosses nodes. */
export const SignalWire = Schema.Union(Typing, Read, Presence)

/** Hands a typing or read signal to every follower of the conversation, on every node. Ephemeral. */
const Publish = Rpc.make("Publish", {
  payload: { signal: Schema.Union(Typing, Read) }
})

/** The conversation's signals from now on; starts with the viewers last announced, if any. */
const Follow = Rpc.make("Follow", {
  success: SignalWire,
  stream: true
})

/**
 * A node's whole set of viewers of the conversation, counted until `leaseMs` from now unless renewed.
 * `version` rises with each change of the node's set, so a report that arrives late is ignored.
 */
const Present = Rpc.make("Present", {
  payload: {
    node: Id,
    version: Schema.NonNegativeInt,
    viewers: Schema.Array(Id).pipe(Schema.maxItems(MAX_REPORTED_VIEWERS)),
    leaseMs: Schema.Int.pipe(Schema.between(1000, 60_000))
  }
})

/** The conversation's viewers now, from every node's unexpired lease. */
const Viewers = Rpc.make("Viewers", {
  success: Schema.Array(Schema.String)
})

/**
 * One entity per conversation (entity id = conversation id) for its typing, read and presence signals.
 * Its state is in memory only: after it moves, the nodes' next lease renewals rebuild it.
 */
export const ConversationSignalsEntity = Entity.make("ConversationSignals", [Publish, Follow, Present, Viewers])
