import { Entity } from "@effect/cluster"
import { Rpc } from "@effect/rpc"
import { Deferred, Duration, Effect, Layer, PubSub, Stream } from "effect"
import { AppConfig } from "../src/config/AppConfig.js"
import { makeDeliveryLoop } from "../src/delivery/DeliveryLoop.js"
import { deliverySettings } from "../src/delivery/DeliverySettings.js"
import { LocalChannelFeeds } from "../src/delivery/LocalChannelFeeds.js"
import { ChannelEntity } from "./ChannelEntity.js"
import { boundedLifetime } from "./ConversationEntityLive.js"

/**
 * After a failed turn (the database away, a channel row it cannot read) the loop tries again this much
 * later, doubling with each failure in a row up to `MAX_FAILED_TURN_PAUSE_MS`.
 */
const FAILED_TURN_PAUSE_MS = 1000
const MAX_FAILED_TURN_PAUSE_MS = 60_000

/**
 * An idle channel entity is dropped after this; the sweep wakes channels with due deliveries more
 * often than that, so a channel with work keeps its entity (and its breaker's memory).
 */
const MAX_IDLE = Duration.minutes(5)

/**
 * The channel entity: owns the channel's delivery loop on whichever node owns its shard. `Wake` starts
 * the loop or, while it runs, makes it take one more turn; the loop runs while it finds due work, sleeps
 * while parked with a known end (an open breaker's cool-down, the rate limit) unless a recheck cuts the
 * sleep short, and stops when idle or parked for good (paused, inactive): a later wake or the sweep
 * starts it again. Its live feed (what the loop's `websocket` sender hands over) lives as long as the
 * entity: `Follow` streams read it.
 */
export const ChannelEntityLive = Layer.unwrapEffect(Effect.map(deliverySettings, (settings) =>
  ChannelEntity.toLayer(
    Effect.gen(function*() {
      const channelId = (yield* Entity.CurrentAddress).entityId
      const loop = yield* makeDeliveryLoop(channelId, settings)
      const feed = yield* (yield* LocalChannelFeeds).open(channelId)
      const bounded = boundedLifetime((yield* AppConfig).clusterStreamLifetimeMs)
      const scope = yield* Effect.scope
      let running = false
      let nudged = false
      // Which loop is the current one: an old loop's exit must not mark a newer one stopped.
      let generation = 0
      // A recheck (a resume) came since the turn started: the park that turn chose may predate it.
      let rechecked = false
      // Set while the loop waits for a known time: a recheck ends the wait early.
      let parkedWait: Deferred.Deferred<void> | undefined

      const turns = (mine: number) =>
        Effect.gen(function*() {
          let failures = 0
          while (true) {
            nudged = false
            rechecked = false
            const result = yield* loop.turn.pipe(
              Effect.tap(() => Effect.sync(() => (failures = 0))),
              Effect.catchAllCause((cause) =>
                Effect.logWarning("delivery turn failed", cause).pipe(
                  Effect.as({
                    _tag: "parked",
                    until: Date.now() + Math.min(MAX_FAILED_TURN_PAUSE_MS, FAILED_TURN_PAUSE_MS * 2 ** failures++)
                  } as const)
                )
              )
            )
            if (result._tag === "worked") continue
            if (result._tag === "parked" && result.until !== null) {
              const cut = yield* Deferred.make<void>()
              parkedWait = cut
              if (!rechecked) {
                yield* Effect.race(Effect.sleep(Duration.millis(Math.max(0, result.until - Date.now()))), Deferred.await(cut))
              }
              parkedWait = undefined
              continue
            }
            // Checked and cleared in one step: a wake that came during the turn gets another turn.
            if (!nudged && generation === mine) {
              running = false
              return
            }
          }
        }).pipe(
          Effect.onExit(() => Effect.sync(() => {
            if (generation === mine) running = false
          })),
          Effect.annotateLogs("channel_id", channelId)
        )

      return ChannelEntity.of({
        Wake: ({ payload }) =>
          Effect.suspend(() => {
            if (running) {
              nudged = true
              // Only a recheck ends a park: the appends' wakes must not turn a cool-down into a read per wake.
              if (payload.recheck !== true) return Effect.void
              rechecked = true
              return parkedWait === undefined ? Effect.void : Effect.asVoid(Deferred.succeed(parkedWait, undefined))
            }
            running = true
            return Effect.asVoid(Effect.forkIn(turns(++generation), scope))
          }),
        // A stream lives long; fork it so the entity keeps taking wakes. Bounded as every entity stream
        // is: the cluster never ends the stream of a node that died (ADR 0014).
        Follow: () =>
          Rpc.fork(bounded(Stream.unwrapScoped(Effect.map(PubSub.subscribe(feed), (live) =>
            // Subscribed before `Following` goes out: whatever is sent after it reaches the follower.
            Stream.concat(
              Stream.succeed({ _tag: "Following" as const }),
              Stream.map(Stream.fromQueue(live), (activity) => ({ _tag: "Delivered" as const, activity }))
            )))))
      })
    }),
    { maxIdleTime: MAX_IDLE }
  )))
