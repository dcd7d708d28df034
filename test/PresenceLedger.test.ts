import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { emptyLedger, renew, settle, viewersAt } from "../src/realtime/PresenceLedger.js"

const LEASE = 6000

describe("PresenceLedger", () => {
  it.effect("the viewers are the union of every node's unexpired lease, sorted, each once", () =>
    Effect.sync(() => {
      let ledger = renew(emptyLedger, { node: "a", version: 1, viewers: ["u2", "u1"] }, 0, LEASE)
      ledger = renew(ledger, { node: "b", version: 1, viewers: ["u3", "u2", "u3"] }, 1000, LEASE)
      expect(viewersAt(ledger, 1000)).toEqual(["u1", "u2", "u3"])
      // a's lease ran out at 6000, b's runs to 7000.
      expect(viewersAt(ledger, 6000)).toEqual(["u2", "u3"])
      expect(viewersAt(ledger, 7000)).toEqual([])
    }))

  it.effect("a renewal extends the lease; a report older than the node's current one changes nothing", () =>
    Effect.sync(() => {
      let ledger = renew(emptyLedger, { node: "a", version: 2, viewers: ["u1"] }, 0, LEASE)
      ledger = renew(ledger, { node: "a", version: 2, viewers: ["u1"] }, 5000, LEASE)
      expect(viewersAt(ledger, 10_000)).toEqual(["u1"])
      // A late report of the set before u1 joined, and of the set before u1 left: both ignored.
      const late = renew(ledger, { node: "a", version: 1, viewers: [] }, 5500, LEASE)
      expect(late).toBe(ledger)
      ledger = renew(ledger, { node: "a", version: 3, viewers: [] }, 6000, LEASE)
      ledger = renew(ledger, { node: "a", version: 2, viewers: ["u1"] }, 6100, LEASE)
      expect(viewersAt(ledger, 6100)).toEqual([])
    }))

  it.effect("settling announces the union the first time and then only when it changed", () =>
    Effect.sync(() => {
      const first = settle(emptyLedger, 0)
      expect(first.announce).toEqual([])
      let ledger = renew(first.ledger, { node: "a", version: 1, viewers: ["u1"] }, 0, LEASE)
      const joined = settle(ledger, 0)
      expect(joined.announce).toEqual(["u1"])
      ledger = renew(joined.ledger, { node: "b", version: 1, viewers: ["u1"] }, 100, LEASE)
      // Another node with the same viewer: the union did not change.
      expect(settle(ledger, 100).announce).toBeUndefined()
      ledger = settle(ledger, 100).ledger
      // a stops renewing (killed); b renews: u1 is still there.
      ledger = renew(ledger, { node: "b", version: 1, viewers: ["u1"] }, 5000, LEASE)
      const afterA = settle(ledger, 6000)
      expect(afterA.announce).toBeUndefined()
      expect(afterA.ledger.leases.has("a")).toBe(false)
      // b stops too: u1 leaves when b's lease runs out, not before.
      expect(settle(afterA.ledger, 10_999).announce).toBeUndefined()
      expect(settle(afterA.ledger, 11_000).announce).toEqual([])
    }))

  it.effect("a node's empty report is kept until it expires, so its late older report cannot revive viewers", () =>
    Effect.sync(() => {
      let ledger = renew(emptyLedger, { node: "a", version: 1, viewers: ["u1"] }, 0, LEASE)
      ledger = renew(ledger, { node: "a", version: 2, viewers: [] }, 10, LEASE)
      expect(ledger.leases.get("a")?.viewers).toEqual([])
      expect(viewersAt(renew(ledger, { node: "a", version: 1, viewers: ["u1"] }, 20, LEASE), 20)).toEqual([])
    }))
})
