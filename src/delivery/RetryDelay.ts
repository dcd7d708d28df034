import type { RetryPolicy } from "../domain/Channel.js"

/** The longest wait a receiver's `Retry-After` can impose: a day, the largest `max_ms` a policy allows. */
export const MAX_RETRY_AFTER_MS = 86_400_000

/**
 * The wait before the next attempt after `attempts` attempts (1 after the first), by the channel's
 * policy, capped at `max_ms`. Jitter spreads retries of many deliveries that failed together: the
 * wait is drawn between half and all of the policy's delay ("equal jitter"). `random01` is in [0, 1).
 * Swappable for a shared retry-schedule function when one exists.
 */
export const retryDelayMs = (policy: RetryPolicy, attempts: number, random01: number): number => {
  const n = Math.max(1, attempts)
  const raw = policy.backoff === "fixed"
    ? policy.base_ms
    : policy.backoff === "linear"
    ? policy.base_ms * n
    // 2^(n-1) overflows to Infinity past ~1000 attempts; the cap below bounds it.
    : policy.base_ms * Math.pow(2, n - 1)
  const capped = Math.min(raw, policy.max_ms)
  return Math.round(capped / 2 + (capped / 2) * random01)
}

/** The wait before the next attempt: the receiver's `Retry-After` when it sent one (bounded), else the policy's. */
export const nextAttemptDelayMs = (policy: RetryPolicy, attempts: number, retryAfterMs: number | undefined, random01: number) =>
  retryAfterMs !== undefined && Number.isFinite(retryAfterMs) && retryAfterMs >= 0
    ? Math.min(retryAfterMs, MAX_RETRY_AFTER_MS)
    : retryDelayMs(policy, attempts, random01)
