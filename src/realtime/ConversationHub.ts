import { Data, Duration, Effect, ExecutionStrategy, Exit, Fiber, PubSub, Ref, Runtime, Scope, Stream } from "effect"
import { ActivityRepo } from "../conversations/ActivityRepo.js"
import { ConversationOwners } from "../conversations/ConversationOwners.js"
import { CATCH_UP_PAGE, inSeqOrder, livePubSub, type ReadAfter, storedBetween } from "../conversations/SeqFollower.js"
import type { Activity } from "../domain/Activity.js"
import { databaseUnavailable, type Unavailable } from "../domain/ApiError.js"
import type { ConversationId } from "../domain/Conversation.js"
import { JobRunner } from "../ops/JobRunner.js"

class UpstreamResent extends Data.TaggedError("UpstreamResent") {}
/**
 * Upstream pause after the entity stream failed (crash, timeout) or ended early (handoff). One that
 * ended after running at least this long reached its lifetime (ConversationEntityLive): no pause.
 */
const RESUBSCRIBE_AFTER = Duration.millis(250)
/**
 * A silent upstream (a crash re-send that never resumed) is caught up from the table this often,
 * and restarted when the head one check read is still not announced at the next.
 */
const GAP_CHECK_EVERY = Duration.seconds(2)
/** Conversations whose heads one gap-check query reads. */
const GAP_CHECK_BATCH = 5000

interface Topic {
  readonly pubsub: PubSub.PubSub<Activity>
  readonly last: Ref.Ref<number>
  /** Publishing is check-then-publish: the upstream and the gap check take turns. */
  readonly publishing: Effect.Semaphore
  /** The highest seq the current upstream received from the entity, or the seq it subscribed from. */
  readonly announced: Ref.Ref<number>
  readonly scope: Scope.CloseableScope
  /** The fiber following the entity's stream; the gap check replaces it when it goes silent. */
  follower: Fiber.RuntimeFiber<never>
  /** The conversation's head at the previous gap check. Changed only by the gap check. */
  headAtCheck: number
  /** Open subscriptions; the topic closes with its last one. Changed only under the hub's lock. */
  listeners: number
}

type Feed = Pick<Topic, "pubsub" | "last" | "publishing" | "announced">

/**
 * The node-local fan-out: one upstream subscription per conversation with local listeners, resumed,
 * gap-filled from the table and restarted when silent, so listeners get every activity once, in order.
 */
export class ConversationHub extends Effect.Service<ConversationHub>()("parley/ConversationHub", {
  scoped: Effect.gen(function*() {
    const activityRepo = yield* ActivityRepo
    const owners = yield* ConversationOwners
    const jobs = yield* JobRunner
    const hubScope = yield* Effect.scope
    // Followers run as fibers of the hub, as conversation cores run as fibers of their service: one
    // forked by the listener whose subscribe opened its topic would log with that listener's request
    // id for all listeners, and keep that listener's fiber reachable while the topic lives.
    const forkInHub = Runtime.runFork(yield* Effect.runtime<never>())
    // Changed only under `lock`; read freely (the gap check copies it).
    const topics = new Map<ConversationId, Topic>()
    const lock = yield* Effect.makeSemaphore(1)

    const readOf = (conversationId: ConversationId): ReadAfter<unknown> => (after, limit) =>
      activityRepo.readAfter(conversationId, after, limit)

    /** Publishes stored activities above the topic's last seq (up to `below`, exclusive, if given). */
    const fillFromTable = (conversationId: ConversationId, topic: Feed, below?: number) =>
      Effect.flatMap(Ref.get(topic.last), (last) =>
        Stream.runForEach(storedBetween(readOf(conversationId), CATCH_UP_PAGE, last, below), (activity) => publishNext(topic, activity)))

    // `last` moves before the publish: a listener that subscribes in between reads the activity
    // from the table (it is committed) instead of missing it in both places. Both are one step: an
    // upstream interrupted in between (restarted) would leave the seq counted and never sent.
    const publishNext = (topic: Feed, activity: Activity) =>
      topic.publishing.withPermits(1)(Effect.uninterruptible(Ref.get(topic.last).pipe(
        Effect.flatMap((last) =>
          activity.seq === last + 1
            ? Ref.set(topic.last, activity.seq).pipe(Effect.zipRight(PubSub.publish(topic.pubsub, activity)))
            : Effect.void
        )
      )))

    /** Follows the entity's stream; after it ends or fails, catches up from the table and follows again. */
    const upstream = (conversationId: ConversationId, topic: Feed) =>
      Ref.get(topic.last).pipe(
        Effect.tap((fromSeq) => Ref.set(topic.announced, fromSeq)),
        Effect.flatMap((fromSeq) =>
          owners.subscribe(conversationId, fromSeq).pipe(
            Stream.runForEach((activity) =>
              Ref.modify(topic.announced, (announced) => [activity.seq > announced, Math.max(announced, activity.seq)]).pipe(
                // A stream's seqs only rise: one that starts again was re-sent after its owner crashed,
                // from the first call's `fromSeq`. It is left for one from what the topic published.
                Effect.filterOrFail((rising) => rising, () => new UpstreamResent()),
                Effect.zipRight(Ref.get(topic.last)),
                Effect.flatMap((last) =>
                  activity.seq > last + 1
                    ? fillFromTable(conversationId, topic, activity.seq).pipe(Effect.zipRight(publishNext(topic, activity)))
                    : publishNext(topic, activity)
                )
              )
            ),
            Effect.timed,
            Effect.map(([ran]) => Duration.greaterThanOrEqualTo(ran, RESUBSCRIBE_AFTER))
          )
        ),
        // Worth a line: it follows an owner's crash, and the fan-out pauses until the resubscribe.
        Effect.tapError((error) =>
          error instanceof UpstreamResent
            ? Effect.logInfo("live fan-out upstream re-sent from its start, resubscribed from what was published").pipe(
              Effect.annotateLogs("conversation_id", conversationId)
            )
            : Effect.void
        ),
        // Ended (its lifetime, a handoff) or failed (crash, timeout): catch up from the table, then
        // follow again, at once after a lifetime.
        Effect.catchAllCause(() => Effect.succeed(false)),
        Effect.tap(fillFromTable(conversationId, topic).pipe(Effect.catchAllCause(() => Effect.void))),
        Effect.flatMap((lived) => (lived ? Effect.void : Effect.sleep(RESUBSCRIBE_AFTER))),
        Effect.forever
      )

    // Interrupted when `scope` closes; interruptible although `open` runs as a stream's resource,
    // acquired uninterruptibly; started on the scheduler, as a fork would be.
    const follow = (conversationId: ConversationId, topic: Feed, scope: Scope.Scope) =>
      Effect.sync(() => forkInHub(upstream(conversationId, topic), { scope, immediate: false }))

    /**
     * Replaces the topic's upstream with one from what it has published. The old one is not awaited (an
     * unreachable owner takes seconds); meanwhile both may publish, and `publishNext` keeps each seq once.
     */
    const restart = (conversationId: ConversationId, topic: Topic) =>
      Effect.gen(function*() {
        yield* Fiber.interruptFork(topic.follower)
        // Into the topic's scope: a topic closed meanwhile interrupts it at once.
        topic.follower = yield* follow(conversationId, topic, topic.scope)
        yield* Effect.logWarning("live fan-out upstream went silent, restarted").pipe(
          Effect.annotateLogs("conversation_id", conversationId)
        )
      })

    /**
     * Catches up every topic behind its conversation's head, one head query per batch. An upstream whose
     * head from the previous check is still unannounced is silent, not trailing its commit: restarted.
     */
    const gapCheck = Effect.gen(function*() {
      const open = [...topics]
      for (let i = 0; i < open.length; i += GAP_CHECK_BATCH) {
        const batch = open.slice(i, i + GAP_CHECK_BATCH)
        const heads = yield* activityRepo.headsOf(batch.map(([id]) => id))
        yield* Effect.forEach(batch, ([id, topic]) =>
          Effect.gen(function*() {
            const head = heads.get(id) ?? 0
            const silent = topic.headAtCheck > (yield* Ref.get(topic.announced))
            topic.headAtCheck = head
            if (head > (yield* Ref.get(topic.last))) {
              yield* fillFromTable(id, topic).pipe(Effect.catchAllCause(() => Effect.void))
            }
            if (silent) yield* restart(id, topic)
          }), { discard: true })
      }
    })
    yield* jobs.every("check_hub_gaps", GAP_CHECK_EVERY, gapCheck)

    /** Starts the topic: `last` at `head`, its upstream forked into a scope of its own. */
    const open = (conversationId: ConversationId, head: number) =>
      Effect.gen(function*() {
        const scope = yield* Scope.fork(hubScope, ExecutionStrategy.sequential)
        const pubsub = yield* livePubSub()
        const last = yield* Ref.make(head)
        const publishing = yield* Effect.makeSemaphore(1)
        const announced = yield* Ref.make(head)
        const feed: Feed = { pubsub, last, publishing, announced }
        const follower = yield* follow(conversationId, feed, scope)
        const topic: Topic = { ...feed, scope, follower, headAtCheck: head, listeners: 1 }
        topics.set(conversationId, topic)
        return topic
      })

    /**
     * The conversation's topic with one more listener. A new topic's head is read before taking the
     * node-wide lock, so subscribing never queues behind another conversation's read.
     */
    const acquire = (conversationId: ConversationId): Effect.Effect<Topic, Effect.Effect.Error<ReturnType<typeof activityRepo.headOf>>> =>
      Effect.flatMap(
        Effect.suspend(() => topics.has(conversationId) ? Effect.succeed(undefined) : activityRepo.headOf(conversationId)),
        (head) =>
          lock.withPermits(1)(Effect.suspend(() => {
            const existing = topics.get(conversationId)
            if (existing !== undefined) {
              existing.listeners++
              return Effect.succeed(existing)
            }
            return head !== undefined ? open(conversationId, head) : Effect.succeed(undefined)
          })).pipe(Effect.flatMap((topic) => topic !== undefined ? Effect.succeed(topic) : acquire(conversationId)))
      )

    /**
     * One listener less; the last closes the topic. Its upstream stops in the background, which can take
     * seconds that neither the lock nor the leaving listener should wait for.
     */
    const release = (conversationId: ConversationId) =>
      lock.withPermits(1)(Effect.sync(() => {
        const topic = topics.get(conversationId)
        if (topic === undefined) return undefined
        topic.listeners--
        if (topic.listeners > 0) return undefined
        topics.delete(conversationId)
        return topic
      })).pipe(
        Effect.flatMap((closing) => closing === undefined ? Effect.void : Effect.forkIn(Scope.close(closing.scope, Exit.void), hubScope)),
        Effect.asVoid
      )

    /**
     * Every activity of the conversation with seq above `fromSeq`, in order, without end: stored
     * ones first, then live ones as they are committed anywhere in the cluster.
     */
    const subscribe = (conversationId: ConversationId, fromSeq: number): Stream.Stream<Activity, Unavailable> =>
      Stream.unwrapScoped(Effect.gen(function*() {
        const topic = yield* Effect.acquireRelease(acquire(conversationId), () => release(conversationId))
        const live = yield* PubSub.subscribe(topic.pubsub)
        const upTo = yield* Ref.get(topic.last)
        // Stored up to what the topic had published when subscribed; live from there on.
        return inSeqOrder({ fromSeq, storedBelow: upTo + 1, live: Stream.fromQueue(live), read: readOf(conversationId), page: CATCH_UP_PAGE })
      })).pipe(Stream.catchAll(() => Stream.fail(databaseUnavailable())))

    return { subscribe } as const
  })
}) {}
