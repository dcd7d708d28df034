import { Duration, Effect, Either } from "effect"
import { connect, headers as natsHeaders, type NatsConnection } from "nats"
import { isIP } from "node:net"
import type { JsonObject, RetryPolicy } from "../domain/Channel.js"
import { AddressGuard } from "./AddressGuard.js"
import { type DeliveryOutcome, delivered, permanent, retryable } from "./WebhookOutcome.js"

/** One attempt of one delivery to a `nats` channel. */
export interface NatsDelivery {
  readonly deliveryId: string
  /** The delivery's payload (the redacted canonical activity), published as JSON. */
  readonly payload: unknown
  /** The channel's config as validated at save (`url`, `subject`). */
  readonly config: JsonObject
  /** `timeout_ms` bounds the connect and the publish. */
  readonly retryPolicy: RetryPolicy
}

/** Connections kept open (one per server URL); the least recently used is closed beyond. */
export const MAX_NATS_CONNECTIONS = 64
/** Closing a connection (eviction, shutdown) waits at most this. */
const CLOSE_BOUND = Duration.seconds(5)
// As ChannelConfig checks it at save; checked again because the row may predate that check.
const SUBJECT = /^[^\s.*>]+(\.[^\s.*>]+)*$/

/** Where to connect: the checked server, and how. */
interface Target {
  readonly key: string
  readonly servers: string
  readonly tls: boolean
  readonly user: string | undefined
  readonly pass: string | undefined
}

const failureText = (error: unknown) => {
  const code = typeof error === "object" && error !== null && "code" in error ? String(error.code) : undefined
  return code ?? (error instanceof Error ? error.message : String(error))
}

/**
 * Publishes deliveries to `nats` channels (CONTRACT.md §4): the canonical activity JSON on
 * `config.subject`, with `x-chat-delivery-id` and `Nats-Msg-Id` headers (JetStream drops duplicates
 * by the latter). A publish counts once the server has it (a flush round trip). The server passes
 * the address guard like a webhook before a connection is opened, and a `nats://` connection is
 * made to the checked address. Never fails: every ending is a `DeliveryOutcome`.
 * The AddressGuard comes from the node (NodeLive), which builds one for every user.
 */
export class NatsPublisher extends Effect.Service<NatsPublisher>()("parley/NatsPublisher", {
  scoped: Effect.gen(function*() {
    const guard = yield* AddressGuard
    // Promises, so that concurrent first publishes to one server share one connection.
    const connections = new Map<string, Promise<NatsConnection>>()

    const closeQuietly = (pending: Promise<NatsConnection>) =>
      pending.then((nc) => nc.close()).catch(() => undefined)

    const forget = (key: string, pending: Promise<NatsConnection>) => {
      if (connections.get(key) === pending) connections.delete(key)
      void closeQuietly(pending)
    }

    yield* Effect.addFinalizer(() =>
      Effect.promise(() => Promise.allSettled([...connections.values()].map(closeQuietly))).pipe(
        Effect.timeout(CLOSE_BOUND),
        Effect.ignore
      )
    )

    /** The guarded target of a config URL; `nats://` is pinned to the checked IP, `tls://` keeps its name for the certificate. */
    const targetOf = (raw: string) =>
      Effect.gen(function*() {
        if (!URL.canParse(raw)) return yield* Effect.fail(permanent("invalid url"))
        const url = new URL(raw)
        const tls = url.protocol === "tls:"
        if (!tls && url.protocol !== "nats:") return yield* Effect.fail(permanent("url must be nats:// or tls://"))
        const port = url.port === "" ? "4222" : url.port
        // The guard judges http(s) URLs: the same host and port as one.
        const checked = yield* Effect.either(guard.check(`http://${url.host}/`))
        if (Either.isLeft(checked)) return yield* Effect.fail(permanent(`address guard: url ${checked.left.reason}`))
        const address = checked.right.addresses[0]
        if (address === undefined) return yield* Effect.fail(retryable("host did not resolve"))
        const host = tls ? url.hostname : isIP(address) === 6 ? `[${address}]` : address
        return {
          key: `${raw}|${tls ? "" : address}`,
          servers: `${host}:${port}`,
          tls,
          user: url.username === "" ? undefined : decodeURIComponent(url.username),
          pass: url.password === "" ? undefined : decodeURIComponent(url.password)
        } satisfies Target
      })

    const connection = (target: Target, timeoutMs: number) => {
      const found = connections.get(target.key)
      if (found !== undefined) {
        connections.delete(target.key)
        connections.set(target.key, found)
        return found
      }
      const pending = connect({
        servers: target.servers,
        name: "parley",
        timeout: timeoutMs,
        // Stay on the checked server: no servers learned from the cluster, no random order.
        ignoreClusterUpdates: true,
        noRandomize: true,
        ...(target.tls ? { tls: {} } : {}),
        ...(target.user === undefined ? {} : target.pass === undefined ? { token: target.user } : { user: target.user, pass: target.pass })
      })
      connections.set(target.key, pending)
      // A connection that failed or closed for good is not reused.
      pending.then(
        (nc) => void nc.closed().then(() => forget(target.key, pending)),
        () => forget(target.key, pending)
      )
      if (connections.size > MAX_NATS_CONNECTIONS) {
        const [oldestKey, oldest] = connections.entries().next().value as [string, Promise<NatsConnection>]
        forget(oldestKey, oldest)
      }
      return pending
    }

    const publish = (delivery: NatsDelivery): Effect.Effect<DeliveryOutcome> =>
      Effect.gen(function*() {
        const subject = delivery.config["subject"]
        if (typeof subject !== "string" || !SUBJECT.test(subject)) return permanent("invalid subject")
        const url = delivery.config["url"]
        if (typeof url !== "string") return permanent("invalid url")
        const target = yield* targetOf(url)
        const timeoutMs = delivery.retryPolicy.timeout_ms
        const body = new TextEncoder().encode(JSON.stringify(delivery.payload))
        const attempt = Effect.tryPromise({
          try: async () => {
            const pending = connection(target, timeoutMs)
            const nc = await pending
            const h = natsHeaders()
            h.set("x-chat-event", "activity.created")
            h.set("x-chat-delivery-id", delivery.deliveryId)
            h.set("Nats-Msg-Id", delivery.deliveryId)
            try {
              nc.publish(subject, body, { headers: h })
              // The round trip: the server has the message once its PONG arrives.
              await nc.flush()
            } catch (error) {
              forget(target.key, pending)
              throw error
            }
            return delivered(null, null)
          },
          catch: (error) => retryable(`nats: ${failureText(error)}`)
        })
        return yield* attempt.pipe(
          Effect.timeoutFail({
            duration: Duration.millis(timeoutMs),
            onTimeout: () => {
              // A server that does not answer in time: start afresh next attempt.
              const stale = connections.get(target.key)
              if (stale !== undefined) forget(target.key, stale)
              return retryable("nats: publish timeout")
            }
          })
        )
      }).pipe(Effect.merge)

    return { publish } as const
  })
}) {}
