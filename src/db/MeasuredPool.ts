import Pg from "pg"

/** The window the readiness `pool` check and the pool-wait metric average over. */
export const POOL_WAIT_WINDOW_MS = 5000
/** Samples kept between two averages at most; past it the older half goes. */
const MAX_SAMPLES = 10_000

/** Pool wait samples `[finishedAtMs, waitedMs]` of the last few seconds. */
export interface PoolWaits {
  readonly averageWaitMs: (windowMs: number) => number
}

/**
 * A pg pool that records how long each checkout waited, for the readiness `pool` check and metrics.
 * pg reports no wait times of its own.
 */
export class MeasuredPool extends Pg.Pool implements PoolWaits {
  private samples: Array<readonly [number, number]> = []
  /** Start times of the checkouts still waiting, by checkout. */
  private readonly waiting = new Map<number, number>()
  private checkouts = 0

  private record(checkout: number, startedAt: number) {
    this.waiting.delete(checkout)
    const now = performance.now()
    this.samples.push([now, now - startedAt])
    if (this.samples.length > MAX_SAMPLES) this.samples = this.samples.slice(-MAX_SAMPLES / 2)
  }

  /** Waits that ended in the window, and those still going on so far: a stuck pool shows too. */
  averageWaitMs(windowMs: number): number {
    const now = performance.now()
    this.samples = this.samples.filter(([at]) => at >= now - windowMs)
    let sum = this.samples.reduce((total, [, waited]) => total + waited, 0)
    for (const startedAt of this.waiting.values()) sum += now - startedAt
    const count = this.samples.length + this.waiting.size
    return count === 0 ? 0 : sum / count
  }

  override connect(): Promise<Pg.PoolClient>
  override connect(
    callback: (err: Error | undefined, client: Pg.PoolClient | undefined, done: (release?: unknown) => void) => void
  ): void
  override connect(
    callback?: (err: Error | undefined, client: Pg.PoolClient | undefined, done: (release?: unknown) => void) => void
  ): Promise<Pg.PoolClient> | void {
    const startedAt = performance.now()
    const checkout = ++this.checkouts
    this.waiting.set(checkout, startedAt)
    if (callback === undefined) {
      return super.connect().finally(() => this.record(checkout, startedAt))
    }
    super.connect((err, client, done) => {
      this.record(checkout, startedAt)
      // Handed over on a fresh stack: a waiter that was interrupted meanwhile gives the client back
      // at once, and pg hands it to the next waiter within that same call. Thousands of such waiters
      // (reads given up while the pool was busy) overflowed the stack and ended the process.
      queueMicrotask(() => callback(err, client, done))
    })
  }
}
