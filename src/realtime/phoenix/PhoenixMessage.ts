import { Either, Predicate } from "effect"

/**
 * One message of the Phoenix protocol version 2.0.0 (CONTRACT.md §6): the JSON array
 * `[join_ref, ref, topic, event, payload]`. Refs are strings or null; the payload is a JSON object.
 */
export interface PhoenixMessage {
  readonly joinRef: string | null
  readonly ref: string | null
  readonly topic: string
  readonly event: string
  readonly payload: Readonly<Record<string, unknown>>
}

/**
 * Why a frame is not a Phoenix message, with whatever of it could be read: a reply goes to `ref` on
 * `topic` when both were readable, otherwise the error goes to topic `phoenix`.
 */
export interface Malformed {
  readonly reason: string
  readonly joinRef: string | null
  readonly ref: string | null
  readonly topic: string | null
}

/** Longest topic or event name read; longer ones are refused (they are echoed in replies). */
const MAX_NAME_CHARS = 256
/** Longest ref read (the JS client counts up in decimal). */
const MAX_REF_CHARS = 64

const refOf = (value: unknown): string | null | undefined =>
  value === null ? null : typeof value === "string" && value.length <= MAX_REF_CHARS ? value : undefined

const nameOf = (value: unknown): string | undefined =>
  typeof value === "string" && value.length > 0 && value.length <= MAX_NAME_CHARS ? value : undefined

/** Reads a text frame; never throws, whatever the text. */
export const parsePhoenixMessage = (text: string): Either.Either<PhoenixMessage, Malformed> => {
  const nothing = { joinRef: null, ref: null, topic: null }
  const json = Either.try(() => JSON.parse(text) as unknown)
  if (Either.isLeft(json)) return Either.left({ reason: "invalid_json", ...nothing })
  const value = json.right
  if (!Array.isArray(value) || value.length !== 5) return Either.left({ reason: "not_a_message", ...nothing })
  const [rawJoinRef, rawRef, rawTopic, rawEvent, payload] = value as [unknown, unknown, unknown, unknown, unknown]
  const joinRef = refOf(rawJoinRef)
  const ref = refOf(rawRef)
  const topic = nameOf(rawTopic)
  // What could be read is kept, so the reply reaches the push that sent it.
  const readable = { joinRef: joinRef ?? null, ref: ref ?? null, topic: ref === undefined ? null : topic ?? null }
  if (joinRef === undefined || ref === undefined) return Either.left({ reason: "invalid_ref", ...readable })
  if (topic === undefined) return Either.left({ reason: "invalid_topic", ...readable })
  const event = nameOf(rawEvent)
  if (event === undefined) return Either.left({ reason: "invalid_event", ...readable })
  if (!Predicate.isRecord(payload) || Array.isArray(payload)) return Either.left({ reason: "invalid_payload", ...readable })
  return Either.right({ joinRef, ref, topic, event, payload })
}

/** Writes a message as the JSON array the Phoenix JS client reads. */
export const encodePhoenixMessage = (message: PhoenixMessage): string =>
  JSON.stringify([message.joinRef, message.ref, message.topic, message.event, message.payload])

/** A `phx_reply` to the push `to`. */
export const phoenixReply = (
  to: { readonly joinRef: string | null; readonly ref: string | null; readonly topic: string },
  status: "ok" | "error",
  response: Readonly<Record<string, unknown>>
): PhoenixMessage => ({ joinRef: to.joinRef, ref: to.ref, topic: to.topic, event: "phx_reply", payload: { status, response } })
