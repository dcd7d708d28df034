import { describe, expect, it } from "@effect/vitest"
import {
  type Breaker,
  closedBreaker,
  onFailure,
  onNeutral,
  onSuccess,
  pause,
  permit,
  reconcile,
  resume
} from "../src/delivery/CircuitBreaker.js"
import { nextAttemptDelayMs, retryDelayMs } from "../src/delivery/RetryDelay.js"
import { DEFAULT_RETRY_POLICY } from "../src/domain/Channel.js"

const SETTINGS = { failureThreshold: 3, coolDownMs: 10_000 }
const T0 = Date.parse("2030-01-01T00:00:00.000Z")

const failTimes = (breaker: Breaker, times: number, now: number) => {
  let b = breaker
  for (let i = 0; i < times; i++) b = onFailure(b, SETTINGS, now)
  return b
}

describe("CircuitBreaker", () => {
  it("stays closed below the threshold and a success forgets the failures", () => {
    const two = failTimes(closedBreaker, 2, T0)
    expect(two.state).toBe("closed")
    expect(two.failures).toBe(2)
    const reset = onSuccess(two)
    expect(reset).toEqual(closedBreaker)
    // Two more after the success do not open it: the failures must be consecutive.
    expect(failTimes(reset, 2, T0).state).toBe("closed")
  })

  it("opens at the threshold, parks until the cool-down, then lets one probe through", () => {
    const open = failTimes(closedBreaker, 3, T0)
    expect(open).toEqual({ state: "open", failures: 0, openedAt: T0 })
    expect(permit(open, SETTINGS, T0 + 9_999)).toEqual({ _tag: "park", breaker: open, until: T0 + 10_000 })
    const probing = permit(open, SETTINGS, T0 + 10_000)
    expect(probing._tag).toBe("probe")
    expect(probing.breaker.state).toBe("half_open")
    // While the probe is out, nothing else goes.
    expect(permit(probing.breaker, SETTINGS, T0 + 10_001)._tag).toBe("park")
  })

  it("closes after a successful probe and opens again, with a new cool-down, after a failed one", () => {
    const half = permit(failTimes(closedBreaker, 3, T0), SETTINGS, T0 + 10_000).breaker
    expect(onSuccess(half)).toEqual(closedBreaker)
    const reopened = onFailure(half, SETTINGS, T0 + 10_500)
    expect(reopened).toEqual({ state: "open", failures: 0, openedAt: T0 + 10_500 })
    expect(permit(reopened, SETTINGS, T0 + 20_000)._tag).toBe("park")
    expect(permit(reopened, SETTINGS, T0 + 20_500)._tag).toBe("probe")
  })

  it("a permanent outcome leaves a closed breaker's count and sends a half-open one back to probe at once", () => {
    const two = failTimes(closedBreaker, 2, T0)
    expect(onNeutral(two)).toBe(two)
    const half = permit(failTimes(closedBreaker, 3, T0), SETTINGS, T0 + 10_000).breaker
    const back = onNeutral(half)
    expect(back.state).toBe("open")
    expect(permit(back, SETTINGS, T0 + 10_001)._tag).toBe("probe")
  })

  it("a pause parks whatever the state and only a resume leaves it; resume closes an open breaker", () => {
    const open = failTimes(closedBreaker, 3, T0)
    const paused = pause(open)
    expect(paused.state).toBe("paused")
    // Neither time nor outcomes of sends still out leave a pause.
    expect(permit(paused, SETTINGS, T0 + 1_000_000)).toEqual({ _tag: "park", breaker: paused, until: null })
    expect(onSuccess(paused)).toBe(paused)
    expect(onFailure(paused, SETTINGS, T0)).toBe(paused)
    expect(resume(paused)).toEqual(closedBreaker)
    expect(resume(open)).toEqual(closedBreaker)
    expect(permit(resume(open), SETTINGS, T0)._tag).toBe("send")
  })

  it("takes in the stored state: the tenant's pause and resume, and an open state a new owner reads", () => {
    const open = failTimes(closedBreaker, 3, T0)
    expect(reconcile(open, "open", 0, T0 + 5)).toBe(open)
    expect(reconcile(open, "paused", 0, T0).state).toBe("paused")
    expect(reconcile(open, "closed", 0, T0)).toEqual(closedBreaker)
    expect(reconcile(closedBreaker, "open", 0, T0 + 7)).toEqual({ state: "open", failures: 0, openedAt: T0 + 7 })
    expect(reconcile(closedBreaker, "half_open", 0, T0 + 7).state).toBe("open")
  })

  it("takes in a closed breaker's stored count: a new owner goes on from the old one's failures", () => {
    const moved = reconcile(closedBreaker, "closed", 2, T0)
    expect(moved).toEqual({ state: "closed", failures: 2, openedAt: null })
    // The threshold (3) counts the failures before the move.
    expect(onFailure(moved, SETTINGS, T0).state).toBe("open")
    // A resume stores no failures: the owner's count goes too.
    expect(reconcile(failTimes(closedBreaker, 2, T0), "closed", 0, T0)).toEqual(closedBreaker)
    const same = failTimes(closedBreaker, 2, T0)
    expect(reconcile(same, "closed", 2, T0)).toBe(same)
  })
})

describe("retry delay", () => {
  const policy = { ...DEFAULT_RETRY_POLICY, base_ms: 1000, max_ms: 10_000 }

  it("doubles from base_ms, capped at max_ms, with the jitter between half and all of it", () => {
    expect([1, 2, 3, 4, 5, 6].map((n) => retryDelayMs(policy, n, 0.999999))).toEqual([1000, 2000, 4000, 8000, 10_000, 10_000])
    expect([1, 2, 3].map((n) => retryDelayMs(policy, n, 0))).toEqual([500, 1000, 2000])
    expect(retryDelayMs(policy, 5000, 0.5)).toBe(7500)
  })

  it("linear and fixed backoffs", () => {
    expect(retryDelayMs({ ...policy, backoff: "linear" }, 3, 0.999999)).toBe(3000)
    expect(retryDelayMs({ ...policy, backoff: "fixed" }, 7, 0)).toBe(500)
  })

  it("a receiver's Retry-After wins, bounded to a day", () => {
    expect(nextAttemptDelayMs(policy, 1, 42_000, 0)).toBe(42_000)
    expect(nextAttemptDelayMs(policy, 1, 10 ** 12, 0)).toBe(86_400_000)
    expect(nextAttemptDelayMs(policy, 1, undefined, 0)).toBe(500)
  })
})
