import { Deferred, Duration, Effect, Fiber, PubSub, Runtime, type Scope, Stream } from "effect"

/**
 * Upstream pause after its stream failed or ended early (a handoff). One that ran at least this long
 * is followed again at once.
 */
const RESUBSCRIBE_AFTER = Duration.millis(250)

/** How a node follows one kind of cluster stream for its local listeners. */
export interface SharedUpstreamOptions<K extends string, W, A> {
  /** The stream of `key` (an entity's stream RPC): followed again after it ends or fails. */
  readonly upstream: (key: K) => Stream.Stream<W, unknown>
  /**
   * Each upstream is followed anew this often: a stream left silent by an owner that crashed (and whose
   * re-send never resumed) recovers within it.
   */
  readonly lifetime: Duration.Duration
  /** Items a local listener may lag behind before the oldest are dropped for it. */
  readonly backlog: number
  /** Made when a topic opens: what each upstream item becomes for its listeners (undefined: nothing). */
  readonly translate: () => (item: W) => A | undefined
}

/** A local listener's share of a topic. */
export interface SharedSubscription<A> {
  /** What the upstream hands on from the subscription on, until the scope closes. */
  readonly items: Stream.Stream<A>
  /** Completes once an upstream of the topic has received its first item: the node follows the source. */
  readonly following: Effect.Effect<void>
}

interface Topic<A> {
  readonly pubsub: PubSub.PubSub<A>
  readonly following: Deferred.Deferred<void>
  follower: Fiber.RuntimeFiber<never> | undefined
  /** Open subscriptions; the topic closes with its last one. */
  listeners: number
}

/**
 * The node-local fan-out of a cluster stream: one upstream per key with local listeners, shared by them,
 * followed again after it ends or fails, and stopped with the last listener. Listeners hear what arrives
 * while they listen; nothing is replayed.
 */
export const makeSharedUpstreams = <K extends string, W, A>(options: SharedUpstreamOptions<K, W, A>) =>
  Effect.gen(function*() {
    const scope = yield* Effect.scope
    // Upstreams run as fibers of the caller's layer, not of the listener that opened their topic.
    const forkInNode = Runtime.runFork(yield* Effect.runtime<never>())
    const topics = new Map<K, Topic<A>>()

    const upstream = (key: K, topic: Topic<A>) => {
      const translate = options.translate()
      return options.upstream(key).pipe(
        Stream.interruptAfter(options.lifetime),
        Stream.runForEach((item) =>
          Deferred.succeed(topic.following, undefined).pipe(
            Effect.zipRight(Effect.suspend(() => {
              const out = translate(item)
              return out === undefined ? Effect.void : Effect.asVoid(PubSub.publish(topic.pubsub, out))
            }))
          )
        ),
        Effect.timed,
        Effect.map(([ran]) => Duration.greaterThanOrEqualTo(ran, RESUBSCRIBE_AFTER)),
        Effect.catchAllCause(() => Effect.succeed(false)),
        Effect.flatMap((lived) => (lived ? Effect.void : Effect.sleep(RESUBSCRIBE_AFTER))),
        Effect.forever
      )
    }

    const acquire = (key: K) =>
      Effect.suspend(() => {
        const existing = topics.get(key)
        if (existing !== undefined) {
          existing.listeners++
          return Effect.succeed(existing)
        }
        return Effect.map(
          Effect.zip(PubSub.sliding<A>(options.backlog), Deferred.make<void>()),
          ([pubsub, following]) => {
            const created: Topic<A> = { pubsub, following, follower: undefined, listeners: 1 }
            topics.set(key, created)
            created.follower = forkInNode(upstream(key, created), { scope, immediate: false })
            return created
          }
        )
      })

    const release = (key: K, topic: Topic<A>) =>
      Effect.suspend(() => {
        topic.listeners--
        if (topic.listeners > 0) return Effect.void
        topics.delete(key)
        // Not awaited: stopping a call to an unreachable owner can take seconds.
        const stop = topic.follower === undefined ? Effect.void : Fiber.interruptFork(topic.follower)
        return Effect.zipRight(stop, PubSub.shutdown(topic.pubsub))
      })

    /** Joins the key's topic until the scope closes; subscribed before it returns, so nothing published later is missed. */
    const subscribe = (key: K): Effect.Effect<SharedSubscription<A>, never, Scope.Scope> =>
      Effect.gen(function*() {
        const topic = yield* Effect.acquireRelease(acquire(key), (topic) => release(key, topic))
        const queue = yield* PubSub.subscribe(topic.pubsub)
        return { items: Stream.fromQueue(queue), following: Deferred.await(topic.following) }
      })

    /** The key's items from now on, as long as the stream runs. */
    const follow = (key: K): Stream.Stream<A> => Stream.unwrapScoped(Effect.map(subscribe(key), (s) => s.items))

    return { subscribe, follow } as const
  })
