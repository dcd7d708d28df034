import type { Deferred } from "effect"
import { type Bucket, ipBuckets } from "../domain/RateLimit.js"

/** One window of one key in one bucket, as this node counts it. */
export interface Slot {
  readonly bucket: Bucket
  readonly key: string
  readonly windowStart: number
  readonly windowEnd: number
  /** Accepted by this node in the window. */
  local: number
  /** `local` as the shared table last stored it. */
  written: number
  /** What the other nodes had counted at the last read. */
  others: number
  /** When the last read of `others` started (`-Infinity`: never read). */
  readAt: number
  /** When it was last decided on; syncs read `others` while that is recent. */
  usedAt: number
  /** Set while the slot reads `others` before a decision; decisions wait for it. */
  learning: Deferred.Deferred<void> | undefined
}

/** The identity of a window, as a map key. */
export const slotId = (bucket: string, key: string, windowStart: number | string, windowEnd: number | string) =>
  `${bucket}\u0000${key}\u0000${windowStart}\u0000${windowEnd}`

/**
 * The windows a node counts in. Per-address windows are capped at `ipWindowsMax`, forgetting the least
 * recently decided one, so a flood of new addresses neither grows memory nor resets windows in use.
 */
export class CounterWindows {
  private readonly ip = new Map<string, Slot>()
  private readonly other = new Map<string, Slot>()

  constructor(readonly ipWindowsMax: number) {}

  /** The window's slot, made empty if missing; a window of an IP bucket becomes the most recently used. */
  take(bucket: Bucket, key: string, windowStart: number, windowEnd: number, now: number): Slot {
    const id = slotId(bucket, key, windowStart, windowEnd)
    const isIp = ipBuckets.has(bucket)
    const windows = isIp ? this.ip : this.other
    const found = windows.get(id)
    if (found !== undefined) {
      if (isIp) {
        // A Map iterates in insertion order: inserted again, the window is the last to be forgotten.
        windows.delete(id)
        windows.set(id, found)
      }
      return found
    }
    const slot: Slot = { bucket, key, windowStart, windowEnd, local: 0, written: 0, others: 0, readAt: -Infinity, usedAt: now, learning: undefined }
    windows.set(id, slot)
    if (isIp && windows.size > this.ipWindowsMax) windows.delete(windows.keys().next().value!)
    return slot
  }

  /** How many windows are kept. */
  get size(): number {
    return this.ip.size + this.other.size
  }

  /** Every window kept. */
  *[Symbol.iterator](): IterableIterator<Slot> {
    yield* this.ip.values()
    yield* this.other.values()
  }

  /** Forgets the windows that ended by `now`. */
  dropEnded(now: number): void {
    for (const windows of [this.ip, this.other]) {
      for (const [id, slot] of windows) if (slot.windowEnd <= now) windows.delete(id)
    }
  }
}
