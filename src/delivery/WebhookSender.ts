import { Effect, Option, Redacted } from "effect"
import { isIP, type LookupFunction } from "node:net"
import { Agent, errors, request as undiciRequest } from "undici"
import { isReservedHeader } from "../channels/ChannelConfig.js"
import type { JsonObject, RetryPolicy } from "../domain/Channel.js"
import { AddressGuard } from "./AddressGuard.js"
import { classifyResponse, type DeliveryOutcome, permanent, retryable } from "./WebhookOutcome.js"
import { signatureHeader } from "./WebhookSignature.js"

/** One attempt of one delivery to a `webhook` channel. */
export interface WebhookDelivery {
  /** Sent as `x-chat-delivery-id`, the same on every attempt. */
  readonly deliveryId: string
  /** The delivery's payload (the redacted canonical activity), sent as JSON. */
  readonly payload: unknown
  /** The channel's config as validated at save (`url`, `method`, `headers`, timeouts, `max_response_bytes`). */
  readonly config: JsonObject
  readonly retryPolicy: RetryPolicy
  /**
   * The channel secret that keys the signature (`ChannelSecrets`); none for a channel whose secret
   * predates sealed secrets: such a delivery cannot be signed and fails permanently.
   */
  readonly secret: Option.Option<Redacted.Redacted<string>>
}

// server-apis.md "webhook channel config" defaults and bounds ("Limits"), applied again at send: a
// row may have been written before a bound existed.
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000
const DEFAULT_MAX_RESPONSE_BYTES = 1_048_576
const MAX_CONNECT_TIMEOUT_MS = 30_000
const MAX_RECEIVE_TIMEOUT_MS = 60_000
const MAX_RESPONSE_BYTES = 10_485_760
const METHODS: ReadonlyArray<string> = ["POST", "PUT", "PATCH"]
/** Pinned agents kept for reuse (one per checked address and connect timeout); the oldest is closed beyond. */
const MAX_AGENTS = 256
const HEADER_VALUE = /^[^\r\n\0]*$/

const positiveInt = (value: unknown, fallback: number, max: number) =>
  Math.min(typeof value === "number" && Number.isInteger(value) && value > 0 ? value : fallback, max)

/**
 * A `lookup` for `net.connect` that answers every name with the address the guard checked: the
 * socket reaches that address whatever DNS says now, while the URL keeps its host for the `Host`
 * header and the TLS server name.
 */
export const pinnedLookup = (address: string): LookupFunction => {
  const family = isIP(address) === 6 ? 6 : 4
  return (_host, options, callback) => {
    if (options.all === true) callback(null, [{ address, family }])
    else callback(null, address, family)
  }
}

/** The body up to `limit` bytes; reading stops (and the connection is dropped) past it. */
const readBounded = async (body: AsyncIterable<Uint8Array>, limit: number) => {
  const chunks: Array<Uint8Array> = []
  let size = 0
  for await (const chunk of body) {
    if (size + chunk.length > limit) {
      chunks.push(chunk.subarray(0, limit - size))
      // Leaving the loop destroys the stream: the rest is never read.
      return { body: Buffer.concat(chunks), complete: false }
    }
    chunks.push(chunk)
    size += chunk.length
  }
  return { body: Buffer.concat(chunks), complete: true }
}

/** A failed request as an outcome: an argument undici refuses is our request's fault and will not heal. */
const transportOutcome = (error: unknown): DeliveryOutcome => {
  if (error instanceof errors.InvalidArgumentError) return permanent(`invalid request: ${error.message}`)
  if (error instanceof errors.ConnectTimeoutError) return retryable("connect timeout")
  if (error instanceof errors.HeadersTimeoutError || error instanceof errors.BodyTimeoutError) {
    return retryable("receive timeout")
  }
  const code = typeof error === "object" && error !== null && "code" in error ? String(error.code) : undefined
  const message = error instanceof Error ? error.message : String(error)
  return retryable(code === undefined ? `transport error: ${message}` : `transport error: ${code}`)
}

/** One prepared request: pinned agent, signed headers, and its bounds. */
interface Exchange {
  readonly url: URL
  readonly dispatcher: Agent
  readonly method: string
  readonly headers: Record<string, string>
  readonly body: Buffer
  readonly receiveTimeoutMs: number
  readonly maxResponseBytes: number
  /** The whole exchange, a slowly dripping body included, ends within this. */
  readonly boundMs: number
}

/**
 * Sends one request and reads its answer, as an outcome; never rejects. Bounded by a timer of its own
 * rather than an Effect timeout: the loop already bounds the attempt with one, and each timeout forks
 * two fibers (ADR 0030, "Cost per delivery"). The timer is cleared when the exchange ends, so none
 * outlives its request.
 */
const exchange = async (request: Exchange, interrupted: AbortSignal): Promise<DeliveryOutcome> => {
  const abort = new AbortController()
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    abort.abort()
  }, request.boundMs)
  const onInterrupt = () => abort.abort()
  interrupted.addEventListener("abort", onInterrupt)
  try {
    // undici's request() follows no redirects: a 3xx comes back as it is.
    const response = await undiciRequest(request.url, {
      dispatcher: request.dispatcher,
      method: request.method,
      headers: request.headers,
      body: request.body,
      signal: abort.signal,
      headersTimeout: request.receiveTimeoutMs,
      bodyTimeout: request.receiveTimeoutMs
    })
    const read = await readBounded(response.body, request.maxResponseBytes)
    return classifyResponse({ status: response.statusCode, headers: response.headers, ...read }, Date.now())
  } catch (error) {
    return timedOut ? retryable("receive timeout") : transportOutcome(error)
  } finally {
    clearTimeout(timer)
    interrupted.removeEventListener("abort", onInterrupt)
  }
}

/**
 * Sends deliveries to webhook channels (server-apis.md "Outbound webhook channel deliveries"): signed,
 * no redirects, bounded in time and response size, and every request checked by the address guard
 * and pinned to the address it checked, so DNS rebinding cannot move it. Never fails: every ending
 * is a `DeliveryOutcome`.
 * The AddressGuard comes from the node (NodeLive), which builds one for every user.
 */
export class WebhookSender extends Effect.Service<WebhookSender>()("parley/WebhookSender", {
  scoped: Effect.gen(function*() {
    const guard = yield* AddressGuard
    const agents = new Map<string, Agent>()
    yield* Effect.addFinalizer(() =>
      Effect.promise(() => Promise.allSettled([...agents.values()].map((agent) => agent.close())))
    )

    /** An agent whose every connection goes to `address`; reused while that address keeps passing the guard. */
    const agentFor = (address: string, connectTimeoutMs: number) => {
      const key = `${address}|${connectTimeoutMs}`
      const found = agents.get(key)
      if (found !== undefined) {
        agents.delete(key)
        agents.set(key, found)
        return found
      }
      const agent = new Agent({ connect: { timeout: connectTimeoutMs, lookup: pinnedLookup(address) } })
      agents.set(key, agent)
      if (agents.size > MAX_AGENTS) {
        const [oldestKey, oldest] = agents.entries().next().value as [string, Agent]
        agents.delete(oldestKey)
        // close() lets requests in flight on it finish.
        void oldest.close().catch(() => undefined)
      }
      return agent
    }

    const send = (delivery: WebhookDelivery): Effect.Effect<DeliveryOutcome> => {
      const { config } = delivery
      const method = typeof config["method"] === "string" ? config["method"].toUpperCase() : "POST"
      if (!METHODS.includes(method)) return Effect.succeed(permanent(`invalid method ${method.slice(0, 16)}`))
      const url = config["url"]
      if (typeof url !== "string") return Effect.succeed(permanent("invalid url"))
      if (Option.isNone(delivery.secret)) return Effect.succeed(permanent("no signing secret: rotate the channel secret"))
      const secret = delivery.secret.value
      return Effect.matchEffect(guard.check(url), {
        onFailure: (rejected) => Effect.succeed(permanent(`address guard: url ${rejected.reason}`)),
        onSuccess: (checked) => {
          const address = checked.addresses[0]
          if (address === undefined) return Effect.succeed(retryable("host did not resolve"))
          const connectTimeoutMs = positiveInt(config["connect_timeout"], DEFAULT_CONNECT_TIMEOUT_MS, MAX_CONNECT_TIMEOUT_MS)
          const receiveTimeoutMs = positiveInt(config["receive_timeout"], delivery.retryPolicy.timeout_ms, MAX_RECEIVE_TIMEOUT_MS)
          const body = Buffer.from(JSON.stringify(delivery.payload))
          const headers: Record<string, string> = {}
          const extra = config["headers"]
          if (typeof extra === "object" && extra !== null && !Array.isArray(extra)) {
            for (const [name, value] of Object.entries(extra)) {
              if (typeof value === "string" && HEADER_VALUE.test(value) && !isReservedHeader(name)) headers[name] = value
            }
          }
          headers["content-type"] = "application/json"
          headers["x-chat-event"] = "activity.created"
          headers["x-chat-delivery-id"] = delivery.deliveryId
          headers["x-chat-signature"] = signatureHeader(Redacted.value(secret), body, Date.now() / 1000)
          const request: Exchange = {
            url: checked.url,
            dispatcher: agentFor(address, connectTimeoutMs),
            method,
            headers,
            body,
            receiveTimeoutMs,
            maxResponseBytes: positiveInt(config["max_response_bytes"], DEFAULT_MAX_RESPONSE_BYTES, MAX_RESPONSE_BYTES),
            boundMs: connectTimeoutMs + receiveTimeoutMs
          }
          // `signal` aborts the request when the caller (the loop's own time bound) interrupts it.
          return Effect.promise((signal) => exchange(request, signal))
        }
      })
    }

    return { send } as const
  })
}) {}
