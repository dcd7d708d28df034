import { Effect, Exit } from "effect"
import { answerWithin, type Reply, WorkQueue } from "../concurrency/WorkQueue.js"

interface Waiting<K, A, E> {
  readonly key: K
  readonly done: Reply<A, E>
  /** The caller was answered already, or interrupted: no batch looks it up any more. */
  answered: boolean
}

/**
 * Runs concurrent callers' lookups in batches of up to `maxBatch`, at most `concurrency` in flight: one
 * round trip per batch, each caller still seeing the database as of its arrival. `run` answers every key.
 */
export const makeBatcher = <K, A, E>(options: {
  readonly maxBatch: number
  readonly concurrency: number
  readonly run: (keys: ReadonlyArray<K>) => Effect.Effect<ReadonlyArray<A>, E>
  /**
   * A batch taking longer fails all its callers: one stuck batch must not hold every later one. A
   * caller waits no longer than this from its call either, however many batches are queued ahead.
   */
  readonly timeout: { readonly ms: number; readonly onTimeout: () => E }
}) =>
  Effect.gen(function*() {
    const queue = new WorkQueue<Waiting<K, A, E>>()

    const runBatch = (taken: ReadonlyArray<Waiting<K, A, E>>) => {
      const batch = taken.filter((waiting) => !waiting.answered)
      if (batch.length === 0) return Effect.void
      return Effect.exit(answerWithin(options.run(batch.map((w) => w.key)), options.timeout.ms, options.timeout.onTimeout)).pipe(
        Effect.map((exit) => batch.forEach((waiting, i) => waiting.done(Exit.map(exit, (answers) => answers[i]!))))
      )
    }

    yield* Effect.forkScoped(
      Effect.forever(queue.take(options.maxBatch).pipe(Effect.flatMap(runBatch))).pipe(
        Effect.replicateEffect(options.concurrency, { concurrency: "unbounded", discard: true })
      )
    )

    // Not `awaitReply`: a caller that is interrupted (its client gone) clears its timer and is not looked up.
    return (key: K): Effect.Effect<A, E> =>
      Effect.async<A, E>((resume) => {
        const waiting: Waiting<K, A, E> = {
          key,
          answered: false,
          done: (exit) => {
            if (waiting.answered) return
            clearTimeout(timer)
            waiting.answered = true
            resume(exit)
          }
        }
        const timer = setTimeout(() => waiting.done(Exit.fail(options.timeout.onTimeout())), options.timeout.ms)
        queue.offer(waiting)
        return Effect.sync(() => {
          clearTimeout(timer)
          waiting.answered = true
        })
      })
  })
