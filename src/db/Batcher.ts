import { Deferred, Effect, Exit, Queue } from "effect"

interface Waiting<K, A, E> {
  readonly key: K
  readonly done: Deferred.Deferred<A, E>
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
}) =>
  Effect.gen(function*() {
    const queue = yield* Effect.acquireRelease(Queue.unbounded<Waiting<K, A, E>>(), Queue.shutdown)

    const runBatch = (batch: ReadonlyArray<Waiting<K, A, E>>) =>
      Effect.exit(options.run(batch.map((w) => w.key))).pipe(
        Effect.flatMap((exit) =>
          Effect.forEach(batch, (waiting, i) =>
            Deferred.done(waiting.done, Exit.map(exit, (answers) => answers[i]!)), { discard: true })
        )
      )

    yield* Effect.forkScoped(
      Effect.forever(Queue.takeBetween(queue, 1, options.maxBatch).pipe(
        Effect.flatMap((chunk) => runBatch([...chunk]))
      )).pipe(Effect.replicateEffect(options.concurrency, { concurrency: "unbounded", discard: true }))
    )

    return (key: K): Effect.Effect<A, E> =>
      Effect.flatMap(Deferred.make<A, E>(), (done) =>
        Queue.offer(queue, { key, done }).pipe(Effect.zipRight(Deferred.await(done))))
  })
