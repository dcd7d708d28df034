import { Effect, Layer } from "effect"
import { ConversationOwners } from "../src/conversations/ConversationOwners.js"
import { ConversationEntity } from "./ConversationEntity.js"

/** Conversations' owners reached through the cluster: each call goes to the conversation's entity. */
export const ConversationOwnersLive = Layer.effect(
  ConversationOwners,
  Effect.map(ConversationEntity.client, (entity) =>
    ConversationOwners.of({
      append: (conversationId, request) => entity(conversationId).Append(request),
      setStatus: (conversationId, request) => entity(conversationId).SetStatus(request),
      subscribe: (conversationId, fromSeq) => entity(conversationId).Subscribe({ fromSeq })
    }))
)
