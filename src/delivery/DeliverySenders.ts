import { Effect, Layer, Option, Schema } from "effect"
import { Activity } from "../domain/Activity.js"
import { makeEchoSender } from "./EchoSender.js"
import { type DeliverySender, DeliverySenders, Outcome, SenderOverrides } from "./DeliverySender.js"
import { LocalChannelFeeds } from "./LocalChannelFeeds.js"
import { NatsPublisher } from "./NatsPublisher.js"
import { Outbox } from "./Outbox.js"
import type { DeliveryOutcome } from "./WebhookOutcome.js"
import { WebhookSender } from "./WebhookSender.js"

/**
 * A channel type with no sender in this build: retried by the channel's policy (and dead-lettered when
 * it runs out), never reported as sent.
 */
export const noSender = (type: string): DeliverySender => ({
  send: () => Effect.succeed(Outcome.Retry({ afterMs: Option.none(), error: `no sender for channel type ${type}` }))
})

/** A network sender's outcome as the delivery loop records it. */
const outcomeOf = (outcome: DeliveryOutcome): Outcome => {
  switch (outcome._tag) {
    case "Delivered":
      return Outcome.Sent({ providerMessageId: Option.fromNullable(outcome.providerMessageId) })
    case "Retryable":
      return Outcome.Retry({ afterMs: Option.fromNullable(outcome.retryAfterMs), error: outcome.error })
    case "Permanent":
      return Outcome.Permanent({ error: outcome.error })
  }
}

/** A database outage while preparing a send: the attempt is retried by the channel's policy. */
const retryLater = (error: { readonly message: string }) =>
  Effect.succeed(Outcome.Retry({ afterMs: Option.none(), error: error.message }))

/** `webhook`: the signed request of server-apis.md, keyed with the channel's sealed secret. */
const makeWebhookSender = Effect.map(WebhookSender, (webhook): DeliverySender => ({
  send: (delivery, channel) =>
    Effect.map(
      webhook.send({
        deliveryId: delivery.id,
        payload: delivery.payload,
        config: channel.config,
        retryPolicy: channel.retryPolicy,
        secret: channel.signingSecret
      }),
      outcomeOf
    )
}))

/** `nats`: the canonical activity published to `config.subject`. */
const makeNatsSender = Effect.map(NatsPublisher, (nats): DeliverySender => ({
  send: (delivery, channel) =>
    Effect.map(
      nats.publish({ deliveryId: delivery.id, payload: delivery.payload, config: channel.config, retryPolicy: channel.retryPolicy }),
      outcomeOf
    )
}))

/**
 * `http_pull`: the delivery becomes the channel's next outbox entry (`sent`); the tenant's acknowledgement
 * makes it `delivered` (docs/delivery/routes.md).
 */
const makeOutboxSender = Effect.map(Outbox, (outbox): DeliverySender => ({
  send: (delivery) =>
    outbox.appendToOutbox(delivery.id).pipe(
      Effect.as(Outcome.Sent({ providerMessageId: Option.none() })),
      Effect.catchTags({
        NotAppendable: (refused) => Effect.succeed(Outcome.Permanent({ error: `not appendable to the outbox: ${refused.reason}` })),
        Unavailable: retryLater,
        BadRequest: retryLater
      })
    )
}))

const decodeActivity = Schema.decodeUnknown(Activity)

/**
 * `websocket`: the activity copy is handed to the channel's live feed, owned by the channel's entity on
 * this node (the loop runs inside it), and is `sent` then, whether or not a socket listens
 * (docs/delivery/websocket.md).
 */
const makeWebsocketSender = Effect.map(LocalChannelFeeds, (feeds): DeliverySender => ({
  send: (delivery, channel) =>
    decodeActivity(delivery.payload).pipe(
      Effect.flatMap((activity) => feeds.publish(channel.id, activity)),
      Effect.map((handed) =>
        handed
          ? Outcome.Sent({ providerMessageId: Option.none() })
          // The entity left this node while the loop finished its batch: the next owner sends it again.
          : Outcome.Retry({ afterMs: Option.none(), error: "the channel's feed is not on this node" })
      ),
      Effect.catchTag("ParseError", () => Effect.succeed(Outcome.Permanent({ error: "the payload is not an activity" })))
    )
}))

/** The product's senders by channel type. A type's sender is one entry of the list below. */
export const DeliverySendersLive = Layer.effect(
  DeliverySenders,
  Effect.gen(function*() {
    const senders = new Map<string, DeliverySender>([
      ["echo", yield* makeEchoSender],
      ["webhook", yield* makeWebhookSender],
      ["nats", yield* makeNatsSender],
      ["http_pull", yield* makeOutboxSender],
      ["websocket", yield* makeWebsocketSender]
    ])
    const overrides = yield* Effect.serviceOption(SenderOverrides)
    if (Option.isSome(overrides)) for (const [type, sender] of overrides.value) senders.set(type, sender)
    return DeliverySenders.of({ forType: (type) => senders.get(type) ?? noSender(type) })
  })
).pipe(Layer.provide(Layer.mergeAll(WebhookSender.Default, NatsPublisher.Default, Outbox.Default)))
