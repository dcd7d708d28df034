import { Effect, Option } from "effect"
import type { ConversationId } from "../domain/Conversation.js"
import type { RateLimiter } from "../ratelimit/RateLimiter.js"
import type { ActivityInput } from "./ActivityRules.js"
import type { ConversationScope, Conversations, KeyCheck } from "./Conversations.js"

/**
 * Posting an activity once the caller is known and allowed to write, on every route that serves it
 * (tenant API, its lean route, client API): rate limit (`activity_create`, per tenant), append; the
 * stored activity or a typed failure. A retry over the limit whose idempotency key is already stored
 * gets its activity, as any retry does. `arrivedAt` is when the request arrived (epoch ms): the
 * append's time budget counts from it.
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
