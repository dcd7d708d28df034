/**
 * A channel's delivery circuit breaker as a pure state machine (ADR 0030): no clock, no storage. The
 * delivery loop feeds it outcomes and the time, persists `state` and `failures` in `channels`
 * (`circuit_state`, `circuit_failures`: ADR 0032), and asks it before each batch whether to send,
 * probe or park.
 */

export type CircuitState = "closed" | "open" | "half_open" | "paused"

export interface BreakerSettings {
  /** Consecutive retryable failures that open a closed breaker. */
  readonly failureThreshold: number
  /** How long an open breaker parks deliveries before one probe is let through. */
  readonly coolDownMs: number
}

export const DEFAULT_BREAKER_SETTINGS: BreakerSettings = { failureThreshold: 5, coolDownMs: 30_000 }

export interface Breaker {
  readonly state: CircuitState
  /** Consecutive retryable failures while closed. */
  readonly failures: number
  /** When the breaker last opened (epoch ms); null unless open or half-open. */
  readonly openedAt: number | null
}

export const closedBreaker: Breaker = { state: "closed", failures: 0, openedAt: null }

const opened = (now: number): Breaker => ({ state: "open", failures: 0, openedAt: now })

/** What the loop may do now: send a batch, send one probe, or leave the deliveries parked until `until`. */
export type Permit =
  | { readonly _tag: "send"; readonly breaker: Breaker }
  | { readonly _tag: "probe"; readonly breaker: Breaker }
  | { readonly _tag: "park"; readonly breaker: Breaker; readonly until: number | null }

/**
 * Asks before a batch. An open breaker past its cool-down becomes half-open and lets exactly one probe
 * through; a half-open one (its probe still out) and a paused one park everything (`until` null: only
 * a resume or the probe's outcome changes that).
 */
export const permit = (breaker: Breaker, settings: BreakerSettings, now: number): Permit => {
  switch (breaker.state) {
    case "closed":
      return { _tag: "send", breaker }
    case "paused":
      return { _tag: "park", breaker, until: null }
    case "half_open":
      return { _tag: "park", breaker, until: null }
    case "open": {
      const until = (breaker.openedAt ?? now) + settings.coolDownMs
      return now >= until
        ? { _tag: "probe", breaker: { state: "half_open", failures: 0, openedAt: breaker.openedAt } }
        : { _tag: "park", breaker, until }
    }
  }
}

/** A delivery succeeded: a half-open probe closes the breaker; a closed one forgets its failures. */
export const onSuccess = (breaker: Breaker): Breaker =>
  breaker.state === "closed" || breaker.state === "half_open" ? closedBreaker : breaker

/**
 * A delivery failed in a way worth retrying (the receiver's trouble, not the message's): a failed
 * probe opens the breaker again, the threshold-th consecutive failure of a closed one opens it.
 */
export const onFailure = (breaker: Breaker, settings: BreakerSettings, now: number): Breaker => {
  switch (breaker.state) {
    case "closed":
      return breaker.failures + 1 >= settings.failureThreshold ? opened(now) : { ...breaker, failures: breaker.failures + 1 }
    case "half_open":
      return opened(now)
    default:
      // Outcomes of sends that were out when the breaker opened or was paused change nothing.
      return breaker
  }
}

/**
 * A delivery that can never be sent (a permanent outcome) says nothing of the receiver's health: a
 * closed breaker keeps its count; a half-open one goes back to open with its old opening time, so the
 * next due delivery is the next probe at once.
 */
export const onNeutral = (breaker: Breaker): Breaker =>
  breaker.state === "half_open" ? { state: "open", failures: 0, openedAt: breaker.openedAt } : breaker

/** The tenant's pause: whatever the state, deliveries park until a resume. */
export const pause = (_breaker: Breaker): Breaker => ({ state: "paused", failures: 0, openedAt: null })

/** The tenant's resume: closes a paused or open breaker (server-apis.md), and a half-open one. */
export const resume = (_breaker: Breaker): Breaker => closedBreaker

/**
 * Takes in the breaker stored in `channels` (`circuit_state`, `circuit_failures`), which the tenant API
 * changes (pause writes `paused`, resume `closed`, both with no failures) and which a new owner of the
 * channel starts from. A closed breaker takes the stored count: the previous owner's after a move. An
 * `open` state read without its opening time (a new owner) starts its cool-down now.
 */
export const reconcile = (breaker: Breaker, stored: CircuitState, storedFailures: number, now: number): Breaker => {
  if (stored === breaker.state) {
    return stored === "closed" && storedFailures !== breaker.failures ? { ...closedBreaker, failures: storedFailures } : breaker
  }
  switch (stored) {
    case "paused":
      return pause(breaker)
    case "closed":
      return { ...resume(breaker), failures: storedFailures }
    case "open":
      return opened(now)
    case "half_open":
      // A new owner cannot know whether the old one's probe came back: it probes again after a cool-down.
      return opened(now)
  }
}
