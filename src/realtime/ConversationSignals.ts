import { Context, Data, type Effect, type Scope, type Stream } from "effect"
import type { BadRequest, Unavailable } from "../domain/ApiError.js"
import type { ConversationId } from "../domain/Conversation.js"

/**
 * What a conversation's listeners hear besides its activities. `origin` names the connection a typing
 * or read came from, so that connection does not hear its own.
 */
export type Signal = Data.TaggedEnum<{
  Typing: { readonly userId: string; readonly origin: string }
  Read: { readonly userId: string; readonly seq: number; readonly origin: string }
  /** The identified viewers of the conversation now (sorted, each once), after one joined or left. */
  Presence: { readonly viewers: ReadonlyArray<string> }
}>
export const Signal = Data.taggedEnum<Signal>()

/**
 * Typing, read receipts and presence of each conversation, across every node of the cluster: what a
 * socket on one node says reaches the sockets and streams of the same conversation on the others.
 */
export class ConversationSignals extends Context.Tag("parley/ConversationSignals")<ConversationSignals, {
  /** Tells the conversation's other listeners that `userId` is typing. */
  readonly typing: (conversationId: ConversationId, userId: string, origin: string) => Effect.Effect<void>
  /** Stores `userId`'s read position (it only moves forward) and tells the listeners. */
  readonly read: (
    conversationId: ConversationId,
    userId: string,
    seq: number,
    origin: string
  ) => Effect.Effect<void, Unavailable | BadRequest>
  /** Counts `userId` among the conversation's viewers until the scope closes. */
  readonly view: (conversationId: ConversationId, userId: string) => Effect.Effect<void, never, Scope.Scope>
  /** The conversation's viewers now. */
  readonly viewers: (conversationId: ConversationId) => Effect.Effect<ReadonlyArray<string>>
  /** The conversation's signals from now on, from every node; a lagging listener loses the oldest. */
  readonly follow: (conversationId: ConversationId) => Stream.Stream<Signal>
}>() {}
