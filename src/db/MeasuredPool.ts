import Pg from "pg"

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

  private record(startedAt: number) {
    const now = performance.now()
    this.samples.push([now, now - startedAt])
    if (this.samples.length > 10_000) this.samples = this.samples.slice(-5_000)
  }

  averageWaitMs(windowMs: number): number {
    const since = performance.now() - windowMs
    this.samples = this.samples.filter(([at]) => at >= since)
    if (this.samples.length === 0) return 0
    return this.samples.reduce((sum, [, waited]) => sum + waited, 0) / this.samples.length
  }

  override connect(): Promise<Pg.PoolClient>
  override connect(
    callback: (err: Error | undefined, client: Pg.PoolClient | undefined, done: (release?: unknown) => void) => void
  ): void
  override connect(
    callback?: (err: Error | undefined, client: Pg.PoolClient | undefined, done: (release?: unknown) => void) => void
  ): Promise<Pg.PoolClient> | void {
    const startedAt = performance.now()
    if (callback === undefined) {
      return super.connect().then((client) => {
        this.record(startedAt)
        return client
      })
    }
    super.connect((err, client, done) => {
      this.record(startedAt)
      callback(err, client, done)
    })
  }
}
