import { Effect, Exit } from "effect"
import { answerWithin, awaitReply, type Reply, WorkQueue } from "../concurrency/WorkQueue.js"

interface Waiting<K, A, E> {
  readonly key: K
  readonly done: Reply<A, E>
}

/**
 * Collects lookups from concurrent callers and runs them in batches: while `concurrency` batches
 * are in flight, new keys wait and go together in the next one (up to `maxBatch`). A hot lookup
 * then costs one database round trip per batch instead of one per request, and each caller still
 * sees the database as it was after its request arrived. `run` answers every key, in order.
 */
export const makeBatcher = <K, A, E>(options: {
  readonly maxBatch: number
  readonly concurrency: number
  readonly run: (keys: ReadonlyArray<K>) => Effect.Effect<ReadonlyArray<A>, E>
  /** A batch taking longer fails all its callers: one stuck batch must not hold every later one. */
  readonly timeout: { readonly ms: number; readonly onTimeout: () => E }
}) =>
  Effect.gen(function*() {
    const queue = new WorkQueue<Waiting<K, A, E>>()

    const runBatch = (batch: ReadonlyArray<Waiting<K, A, E>>) =>
      Effect.exit(answerWithin(options.run(batch.map((w) => w.key)), options.timeout.ms, options.timeout.onTimeout)).pipe(
        Effect.map((exit) => batch.forEach((waiting, i) => waiting.done(Exit.map(exit, (answers) => answers[i]!))))
      )

    yield* Effect.forkScoped(
      Effect.forever(queue.take(options.maxBatch).pipe(Effect.flatMap(runBatch))).pipe(
        Effect.replicateEffect(options.concurrency, { concurrency: "unbounded", discard: true })
      )
    )

    return (key: K): Effect.Effect<A, E> => awaitReply<A, E>((done) => queue.offer({ key, done }))
  })
