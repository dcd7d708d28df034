import { Either, ParseResult, Schema } from "effect"
import { Packr, Unpackr } from "msgpackr"
import type { ProtocolFrame } from "../ProtocolFrames.js"

/**
 * The wire forms of the native Protocol v1 socket (CONTRACT.md §5): JSON text frames for `chat.v1` and
 * `chat.v1+json`, the same objects as msgpack binary frames for `chat.v1+msgpack`. Pure: no I/O, no
 * clock but the timestamps of the frames it builds.
 */
export type Format = "json" | "msgpack"

/** The subprotocols of the endpoint, in the order the server prefers them. */
export const SUPPORTED_PROTOCOLS = ["chat.v1", "chat.v1+json", "chat.v1+msgpack"] as const

/** The format of a negotiated subprotocol; none offered (`""`) is JSON, as `chat.v1`. */
export const formatOf = (protocol: string): Format => (protocol === "chat.v1+msgpack" ? "msgpack" : "json")

/** As `postActivity`'s `clientId` (client-api.md "Sockets"); linear, safe on hostile input. */
const CLIENT_ID = /^[A-Za-z0-9._:~-]{1,128}$/
/** Longer than any token we sign: a longer one is refused before it is verified. */
const MAX_TOKEN_CHARS = 8192
/** Deeper values are refused: nothing the API takes nests this deep, and the checks that follow recurse. */
const MAX_DEPTH = 64

const JsonObject = Schema.Record({ key: Schema.String, value: Schema.Unknown })

export const Hello = Schema.Struct({ type: Schema.Literal("hello"), watermark: Schema.optional(Schema.Unknown) })
export const Send = Schema.Struct({
  type: Schema.Literal("send"),
  clientId: Schema.String.pipe(Schema.pattern(CLIENT_ID, { message: () => "clientId must be 1 to 128 of A-Z a-z 0-9 . _ : ~ -" })),
  activity: JsonObject
})
export const Typing = Schema.Struct({ type: Schema.Literal("typing") })
export const Read = Schema.Struct({ type: Schema.Literal("read"), seq: Schema.Int.pipe(Schema.nonNegative()) })
export const Ping = Schema.Struct({ type: Schema.Literal("ping") })
/** In-band token refresh: an extension of Protocol v1 (docs/realtime/native.md). */
export const Auth = Schema.Struct({
  type: Schema.Literal("auth"),
  token: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(MAX_TOKEN_CHARS))
})

/** A client frame, decoded. */
export const ClientFrame = Schema.Union(Hello, Send, Typing, Read, Ping, Auth)
export type ClientFrame = typeof ClientFrame.Type

const byType = { hello: Hello, send: Send, typing: Typing, read: Read, ping: Ping, auth: Auth } as const
type FrameType = keyof typeof byType
const isFrameType = (type: string): type is FrameType => Object.hasOwn(byType, type)

/** Why a client frame was not taken: the code and fields of the error frame that answers it. */
export interface FrameRefusal {
  readonly code: "bad_request" | "invalid_message"
  readonly message: string
  readonly clientId?: string
  readonly details?: Readonly<Record<string, ReadonlyArray<string>>>
}

const refuse = (message: string, details?: Record<string, ReadonlyArray<string>>): Either.Either<never, FrameRefusal> =>
  Either.left({ code: "bad_request", message, ...(details === undefined ? {} : { details }) })

/**
 * `value` as plain JSON data (null, booleans, finite numbers, strings, arrays, string-keyed objects), no
 * deeper than `MAX_DEPTH`; msgpack maps become objects. Anything else (binary, timestamps, big integers,
 * non-string keys) is undefined.
 */
const plain = (value: unknown, depth: number): { readonly ok: unknown } | undefined => {
  if (value === null || typeof value === "string" || typeof value === "boolean") return { ok: value }
  if (typeof value === "number") return Number.isFinite(value) ? { ok: value } : undefined
  if (typeof value !== "object" || depth >= MAX_DEPTH) return undefined
  if (Array.isArray(value)) {
    const out: Array<unknown> = []
    for (const item of value) {
      const checked = plain(item, depth + 1)
      if (checked === undefined) return undefined
      out.push(checked.ok)
    }
    return { ok: out }
  }
  const entries: Array<[string, unknown]> = []
  if (value instanceof Map) {
    for (const [key, item] of value) {
      if (typeof key !== "string") return undefined
      entries.push([key, item])
    }
  } else if (Object.getPrototypeOf(value) === Object.prototype) {
    entries.push(...Object.entries(value))
  } else {
    return undefined
  }
  const out: Array<[string, unknown]> = []
  for (const [key, item] of entries) {
    const checked = plain(item, depth + 1)
    if (checked === undefined) return undefined
    out.push([key, checked.ok])
  }
  // fromEntries defines own properties: a `__proto__` key stays a key.
  return { ok: Object.fromEntries(out) }
}

// Records, structures and extensions off: a client frame is plain data and nothing else.
const unpackr = new Unpackr({ useRecords: false, mapsAsObjects: false, moreTypes: false })
const packr = new Packr({ useRecords: false, moreTypes: false })

/** The root value of a frame, or why it is not one. */
const parse = (format: Format, data: Buffer, binary: boolean): Either.Either<unknown, FrameRefusal> => {
  if (format === "json" && binary) return refuse("this subprotocol takes JSON text frames")
  if (format === "msgpack" && !binary) return refuse("chat.v1+msgpack takes msgpack binary frames")
  return Either.try({
    // Both throw on malformed input; msgpackr also on trailing bytes, unknown extensions and nesting past the stack.
    try: () => (format === "json" ? JSON.parse(data.toString("utf8")) as unknown : unpackr.unpack(data) as unknown),
    catch: () => ({ code: "bad_request", message: format === "json" ? "the frame is not valid JSON" : "the frame is not valid msgpack" }) as const
  })
}

const detailsOf = (error: ParseResult.ParseError): Record<string, ReadonlyArray<string>> => {
  const details: Record<string, Array<string>> = {}
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const key = issue.path.length === 0 ? "frame" : issue.path.map(String).join(".")
    ;(details[key] ??= []).push(issue.message)
  }
  return details
}

/**
 * A client frame from the bytes of one WebSocket message. Garbage of any kind is a refusal, never an
 * exception: the socket answers it with an error frame and stays open.
 */
export const decodeClientFrame = (format: Format, data: Buffer, binary: boolean): Either.Either<ClientFrame, FrameRefusal> =>
  Either.flatMap(parse(format, data, binary), (root): Either.Either<ClientFrame, FrameRefusal> => {
    const checked = plain(root, 0)
    if (checked === undefined) return refuse("the frame holds values that are not plain JSON data, or nests too deep")
    const frame = checked.ok
    if (typeof frame !== "object" || frame === null || Array.isArray(frame)) return refuse("a frame is an object with a type")
    const type: unknown = (frame as Record<string, unknown>)["type"]
    if (typeof type !== "string") return refuse("a frame needs a string type", { type: ["is missing or not a string"] })
    if (!isFrameType(type)) {
      return refuse("unknown frame type", { type: [`must be one of ${Object.keys(byType).join(", ")}`] })
    }
    const decoded = Schema.decodeUnknownEither(byType[type] as Schema.Schema<ClientFrame>)(frame, { errors: "all" })
    if (Either.isRight(decoded)) return Either.right(decoded.right)
    if (type === "send") return Either.left(sendRefusal(frame as Record<string, unknown>, decoded.left))
    return refuse(`malformed ${type} frame`, detailsOf(decoded.left))
  })

/** A send with a valid `clientId` is answered with it: only the activity was wrong. */
const sendRefusal = (frame: Record<string, unknown>, error: ParseResult.ParseError): FrameRefusal => {
  const clientId = frame["clientId"]
  if (typeof clientId !== "string" || !CLIENT_ID.test(clientId)) {
    return { code: "bad_request", message: "malformed send frame", details: detailsOf(error) }
  }
  return { code: "invalid_message", message: "the activity is invalid", clientId, details: { activity: ["must be an object"] } }
}

/** A server frame as the negotiated format carries it: a text frame for JSON, a binary frame for msgpack. */
export const encodeServerFrame = (format: Format, frame: object): string | Uint8Array =>
  format === "json" ? JSON.stringify(frame) : packr.pack(frame)

/** The socket's limits as `welcome` announces them. */
export interface WelcomeLimits {
  readonly maxInFlight: number
  readonly maxFrameBytes: number
}

export const welcomeFrame = (
  data: { readonly conversationId: string; readonly headSeq: number; readonly heartbeatIntervalMs: number; readonly limits: WelcomeLimits }
): ProtocolFrame => ({ type: "welcome", data, timestamp: Date.now() })

export const ackFrame = (clientId: string, id: string, seq: number): ProtocolFrame => ({ type: "ack", clientId, id, seq, timestamp: Date.now() })

export const pongFrame = (): ProtocolFrame => ({ type: "pong", timestamp: Date.now() })

/** The in-band refresh took the new token; `expiresAt` is its expiry, ms since the epoch. */
export const authOkFrame = (expiresAt: number): ProtocolFrame => ({ type: "authOk", expiresAt, timestamp: Date.now() })
