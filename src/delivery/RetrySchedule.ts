import type { RetryPolicy } from "../domain/Channel.js"

/** A `Retry-After` is honoured up to this (a day, the largest `max_ms` a policy may set). */
export const MAX_RETRY_AFTER_MS = 86_400_000

/** What happens after a failed attempt that may be retried. */
export type RetryDecision =
  | { readonly _tag: "RetryIn"; readonly delayMs: number }
  | { readonly _tag: "DeadLetter" }

/**
 * The delay before attempt `attemptsMade + 1`, before jitter: `base_ms` doubled per attempt
 * (exponential), grown by `base_ms` per attempt (linear) or constant (fixed), never above `max_ms`.
 */
export const backoffMs = (policy: RetryPolicy, attemptsMade: number): number => {
  const n = Math.max(1, attemptsMade)
  const raw = policy.backoff === "exponential"
    ? policy.base_ms * 2 ** Math.min(n - 1, 52)
    : policy.backoff === "linear"
    ? policy.base_ms * n
    : policy.base_ms
  return Math.min(raw, policy.max_ms)
}

/**
 * After `attemptsMade` attempts (the failed one included): dead letter once `max_attempts` are spent,
 * else wait. Jitter spreads the retries of many deliveries that failed together: the wait is drawn
 * from the upper half of the backoff (`random` in [0, 1)), so it never collapses to zero. A receiver's
 * `Retry-After` replaces the backoff (up to a day) and is not jittered: the receiver asked for it.
 */
export const nextRetry = (
  policy: RetryPolicy,
  attemptsMade: number,
  retryAfterMs: number | null,
  random: number
): RetryDecision => {
  if (attemptsMade >= policy.max_attempts) return { _tag: "DeadLetter" }
  if (retryAfterMs !== null) return { _tag: "RetryIn", delayMs: Math.min(Math.max(0, retryAfterMs), MAX_RETRY_AFTER_MS) }
  const backoff = backoffMs(policy, attemptsMade)
  const half = backoff / 2
  return { _tag: "RetryIn", delayMs: Math.round(half + half * Math.min(Math.max(random, 0), 1)) }
}
