import { Effect, Layer, Option } from "effect"
import { makeEchoSender } from "./EchoSender.js"
import { type DeliverySender, DeliverySenders, Outcome, SenderOverrides } from "./DeliverySender.js"

/**
 * A channel type with no sender in this build: retried by the channel's policy (and dead-lettered when
 * it runs out), never reported as sent.
 */
export const noSender = (type: string): DeliverySender => ({
  send: () => Effect.succeed(Outcome.Retry({ afterMs: Option.none(), error: `no sender for channel type ${type}` }))
})

/** The product's senders by channel type. A type's sender is one entry of the list below. */
export const DeliverySendersLive = Layer.effect(
  DeliverySenders,
  Effect.gen(function*() {
    const senders = new Map<string, DeliverySender>([
      ["echo", yield* makeEchoSender]
      // ["webhook", yield* makeWebhookSender],
    ])
    const overrides = yield* Effect.serviceOption(SenderOverrides)
    if (Option.isSome(overrides)) for (const [type, sender] of overrides.value) senders.set(type, sender)
    return DeliverySenders.of({ forType: (type) => senders.get(type) ?? noSender(type) })
  })
)
