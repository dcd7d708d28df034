/**
 * Who views a conversation, kept by the conversation's signals entity from the nodes' leases: each node
 * reports the viewers it serves (its whole set, not changes), and its report counts until the lease
 * expires. A node that dies stops renewing, so its viewers drop out when its lease runs out.
 */

/** One node's report: its viewers of the conversation, the node's version of that set, until when. */
export interface Lease {
  readonly viewers: ReadonlyArray<string>
  /** Rises with each change of the node's set: a report that arrives after a newer one is ignored. */
  readonly version: number
  /** Epoch ms; the lease counts while `now < expiresAt`. */
  readonly expiresAt: number
}

export interface PresenceLedger {
  /** Per node id. A lease with no viewers is kept until it expires, so an older report cannot revive it. */
  readonly leases: ReadonlyMap<string, Lease>
  /** The viewers last announced to listeners; undefined before the first announcement. */
  readonly announced: ReadonlyArray<string> | undefined
}

export const emptyLedger: PresenceLedger = { leases: new Map(), announced: undefined }

const sameViewers = (a: ReadonlyArray<string>, b: ReadonlyArray<string>) =>
  a.length === b.length && a.every((v, i) => v === b[i])

/** The union of the viewers of unexpired leases at `now`: sorted, each once. */
export const viewersAt = (ledger: PresenceLedger, now: number): ReadonlyArray<string> => {
  const all = new Set<string>()
  for (const lease of ledger.leases.values()) {
    if (lease.expiresAt > now) for (const viewer of lease.viewers) all.add(viewer)
  }
  return [...all].sort()
}

/**
 * Records `node`'s report at `now`, valid for `leaseMs`. A report older than the node's current one
 * (lower version) changes nothing; the same version renews the lease.
 */
export const renew = (
  ledger: PresenceLedger,
  report: { readonly node: string; readonly version: number; readonly viewers: ReadonlyArray<string> },
  now: number,
  leaseMs: number
): PresenceLedger => {
  const current = ledger.leases.get(report.node)
  if (current !== undefined && current.version > report.version) return ledger
  const leases = new Map(ledger.leases)
  leases.set(report.node, { viewers: [...new Set(report.viewers)].sort(), version: report.version, expiresAt: now + leaseMs })
  return { ...ledger, leases }
}

/**
 * Drops the leases expired at `now` and, when the union differs from what was announced (or nothing
 * was yet), gives the union to announce and records it as announced.
 */
export const settle = (
  ledger: PresenceLedger,
  now: number
): { readonly ledger: PresenceLedger; readonly announce: ReadonlyArray<string> | undefined } => {
  const leases = new Map([...ledger.leases].filter(([, lease]) => lease.expiresAt > now))
  const viewers = viewersAt({ leases, announced: undefined }, now)
  const changed = ledger.announced === undefined || !sameViewers(ledger.announced, viewers)
  return { ledger: { leases, announced: changed ? viewers : ledger.announced }, announce: changed ? viewers : undefined }
}
