import { Effect, Option } from "effect"
import type { ConversationId } from "../domain/Conversation.js"
import type { RateLimiter } from "../ratelimit/RateLimiter.js"
import type { ActivityInput } from "./ActivityRules.js"
import type { ConversationScope, Conversations, KeyCheck } from "./Conversations.js"

/**
 * Posts an activity for a caller allowed to write, on every route that serves it: rate limit, then
 * append. A retry over the limit whose idempotency key is stored still gets its activity.
 */
export const postActivity = (conversations: Conversations, limiter: RateLimiter) =>
(
  scope: ConversationScope,
  conversationId: ConversationId,
  payload: ActivityInput,
  idempotencyKey: string | undefined,
  arrivedAt: number,
  keyCheck?: KeyCheck
) =>
  Effect.zipRight(
    limiter.consume("activity_create", scope.tenantId, scope.tenantId),
    conversations.append(scope, conversationId, payload, {
      idempotencyKey: idempotencyKey ?? null,
      sourceChannelId: null,
      arrivedAt,
      keyCheck
    })
  ).pipe(
    Effect.catchTag("RateLimited", (limited) =>
      idempotencyKey === undefined ? Effect.fail(limited) : conversations.storedUnderKey(scope, conversationId, idempotencyKey).pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.fail(limited), onSome: Effect.succeed }))
      ))
  )
