import { Effect, Option } from "effect"
import { type TenantCredential, withScope } from "../auth/TenantCredential.js"
import type { ConversationId } from "../domain/Conversation.js"
import type { RateLimiter } from "../ratelimit/RateLimiter.js"
import type { ActivityInput } from "./ActivityRules.js"
import type { Conversations, KeyCheck } from "./Conversations.js"

/**
 * `POST /conversations/:id/activities` once the caller is known, on either route that serves it:
 * scope, rate limit, append; the stored activity or a typed failure. A retry over the limit whose
 * idempotency key is already stored gets its activity, as any retry does. `arrivedAt` is when the
 * request arrived (epoch ms): the append's time budget counts from it.
 */
export const postActivity = (conversations: Conversations, limiter: RateLimiter) =>
(
  credential: TenantCredential,
  conversationId: ConversationId,
  payload: ActivityInput,
  idempotencyKey: string | undefined,
  arrivedAt: number,
  keyCheck?: KeyCheck
) =>
  withScope(
    credential,
    "write",
    Effect.zipRight(
      limiter.consume("activity_create", credential.tenantId, credential.tenantId),
      conversations.append(credential, conversationId, payload, {
        idempotencyKey: idempotencyKey ?? null,
        sourceChannelId: null,
        arrivedAt,
        keyCheck
      })
    )
  ).pipe(
    Effect.catchTag("RateLimited", (limited) =>
      idempotencyKey === undefined ? Effect.fail(limited) : conversations.storedUnderKey(credential, conversationId, idempotencyKey).pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.fail(limited), onSome: Effect.succeed }))
      ))
  )
