import { Rpc } from "@effect/rpc"
import { Clock, Duration, Effect, PubSub, Schedule, Stream } from "effect"
import { AppConfig } from "../src/config/AppConfig.js"
import { emptyLedger, renew, settle, viewersAt } from "../src/realtime/PresenceLedger.js"
import { boundedLifetime } from "./ConversationEntityLive.js"
import { ConversationSignalsEntity, type SignalWire } from "./ConversationSignalsEntity.js"

/**
 * How long a newly started entity (first use, or after it moved) collects the nodes' renewals before it
 * announces viewers: more than one renewal interval (ConversationSignalsLive), so every live node has
 * reported and listeners do not see viewers leave and come back while the ledger is rebuilt.
 */
export const PRESENCE_WARM_UP = Duration.seconds(3)
/** Expired leases are dropped, and the change announced, this often. */
export const PRESENCE_SWEEP_EVERY = Duration.seconds(1)
/** Signals a follower may lag behind before the oldest are dropped: they are ephemeral. */
const FOLLOWER_BACKLOG = 256

/**
 * The signals entity: a fan-out of typing and read signals to every node following the conversation,
 * and the presence ledger of the nodes' viewer leases, announced as `Presence` when the union changes.
 */
export const ConversationSignalsEntityLive = ConversationSignalsEntity.toLayer(
  Effect.gen(function*() {
    const bounded = boundedLifetime((yield* AppConfig).clusterStreamLifetimeMs)
    const signals = yield* PubSub.sliding<typeof SignalWire.Type>(FOLLOWER_BACKLOG)
    // Changed only in synchronous steps (handlers and the sweep never interleave within one).
    let ledger = emptyLedger
    let warm = false

    const announce = Effect.flatMap(Clock.currentTimeMillis, (now) => {
      const settled = settle(ledger, now)
      ledger = settled.ledger
      return settled.announce === undefined
        ? Effect.void
        : Effect.asVoid(PubSub.publish(signals, { _tag: "Presence" as const, viewers: settled.announce }))
    })
    // In the entity's scope: it stops when the entity is passivated or moves.
    yield* Effect.forkScoped(
      Effect.sleep(PRESENCE_WARM_UP).pipe(
        Effect.zipRight(Effect.sync(() => {
          warm = true
        })),
        Effect.zipRight(Effect.repeat(announce, Schedule.spaced(PRESENCE_SWEEP_EVERY)))
      )
    )

    return ConversationSignalsEntity.of({
      Publish: ({ payload }) => Effect.asVoid(PubSub.publish(signals, payload.signal)),
      // A stream lives long; fork it so the entity keeps taking messages one at a time. Bounded as the
      // conversation entity's streams are: the cluster never ends the stream of a node that died (ADR 0014).
      Follow: () =>
        Rpc.fork(bounded(Stream.unwrapScoped(Effect.gen(function*() {
          const live = yield* PubSub.subscribe(signals)
          // Read after subscribing: a change in between arrives twice, which nodes drop (same viewers).
          const current = ledger.announced
          return Stream.concat(
            Stream.fromIterable(current === undefined ? [] : [{ _tag: "Presence" as const, viewers: current }]),
            Stream.fromQueue(live)
          )
        })))),
      Present: ({ payload }) =>
        Effect.flatMap(Clock.currentTimeMillis, (now) => {
          ledger = renew(ledger, payload, now, payload.leaseMs)
          return warm ? announce : Effect.void
        }),
      Viewers: () => Effect.map(Clock.currentTimeMillis, (now) => viewersAt(ledger, now))
    })
  }),
  { concurrency: 1 }
)
