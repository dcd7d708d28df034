import { Either, ParseResult, Schema } from "effect"
import { Characters } from "./Characters.js"

/** A field that may be left out; when present it must match (JSON has no `undefined`). */
const optional = <S extends Schema.Schema.Any>(schema: S) => Schema.optionalWith(schema, { exact: true })

const Label = Characters(1, 256)
const Url = Characters(0, 2048).pipe(Schema.pattern(/^https?:\/\/\S+$/))

const Button = Schema.Struct({
  label: Label,
  value: optional(Characters(0, 1024)),
  url: optional(Url)
})
const Buttons = Schema.Array(Button).pipe(Schema.minItems(1), Schema.maxItems(20))

/**
 * Payload schemas of the typed messages Parley knows (docs/typed-messages.md). Other renderer names
 * are accepted with any object payload.
 */
const TypedPayloads = {
  buttons: Schema.Struct({ text: optional(Schema.String), buttons: Buttons }),
  card: Schema.Struct({
    title: Label,
    subtitle: optional(Schema.String),
    imageUrl: optional(Url),
    buttons: optional(Buttons)
  }),
  image: Schema.Struct({
    url: Url,
    alt: optional(Schema.String),
    width: optional(Schema.Int.pipe(Schema.positive())),
    height: optional(Schema.Int.pipe(Schema.positive()))
  }),
  location: Schema.Struct({
    latitude: Schema.Number.pipe(Schema.between(-90, 90)),
    longitude: Schema.Number.pipe(Schema.between(-180, 180)),
    name: optional(Schema.String),
    address: optional(Schema.String)
  }),
  tool_call: Schema.Struct({
    name: Label,
    callId: optional(Schema.String),
    arguments: optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
    status: optional(Schema.Literal("pending", "running", "completed", "failed"))
  }),
  genui: Schema.Struct({
    component: Label,
    props: optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
    text: optional(Schema.String)
  }),
  interrupt: Schema.Struct({
    prompt: Schema.String.pipe(Schema.minLength(1)),
    options: optional(Schema.Array(Label).pipe(Schema.maxItems(20)))
  })
} as const

type Known = keyof typeof TypedPayloads

const isKnown = (name: string): name is Known => Object.hasOwn(TypedPayloads, name)

/** Renderer names: a letter, then letters, digits, `_`, `-` or `.`, at most 64 characters. */
export const MESSAGE_TYPE_NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/

/** "Expected a", "Expected b", "Expected c" as "Expected a, b or c". */
const alternatives = (expected: ReadonlyArray<string>) => {
  if (expected.length === 1 || !expected.every((e) => e.startsWith("Expected "))) return expected.join("; ")
  const parts = expected.map((e) => e.slice("Expected ".length))
  return `Expected ${parts.slice(0, -1).join(", ")} or ${parts[parts.length - 1]}`
}

/**
 * One message per field, prefixed with its path. The value sent is not repeated (it may be a
 * payload's worth of JSON), and a field that could be one of several things says so once.
 */
const problemsOf = (error: ParseResult.ParseError): Array<string> => {
  const byPath = new Map<string, Array<string>>()
  for (const issue of ParseResult.ArrayFormatter.formatErrorSync(error)) {
    const path = issue.path.join(".")
    const expected = issue.message.replace(/, actual [\s\S]*$/, "")
    const known = byPath.get(path) ?? []
    if (!known.includes(expected)) byPath.set(path, [...known, expected])
  }
  return [...byPath].map(([path, expected]) => (path === "" ? alternatives(expected) : `${path}: ${alternatives(expected)}`))
}

/** Checks a typed payload; Left holds readable messages. */
export const checkPayload = (messageType: string, payload: Record<string, unknown>): Either.Either<void, Array<string>> => {
  if ("type" in payload || "seq" in payload) return Either.left(["must not carry type or seq"])
  if (!isKnown(messageType)) return Either.right(undefined)
  return Schema.decodeUnknownEither(TypedPayloads[messageType] as Schema.Schema<unknown>, { errors: "all" })(payload).pipe(
    Either.mapBoth({ onLeft: problemsOf, onRight: () => undefined })
  )
}

/** The text a typed message stands for when the client sent none. */
export const textOf = (messageType: string, payload: Record<string, unknown>): string | null => {
  const str = (v: unknown) => (typeof v === "string" && v.length > 0 ? v : null)
  switch (messageType) {
    case "buttons":
      return str(payload["text"])
    case "card":
      return str(payload["title"])
    case "image":
      return str(payload["alt"])
    case "location":
      return str(payload["name"]) ?? `${String(payload["latitude"])},${String(payload["longitude"])}`
    case "tool_call":
      return str(payload["name"])
    case "genui":
      return str(payload["text"]) ?? str(payload["component"])
    case "interrupt":
      return str(payload["prompt"])
    default:
      return str(payload["text"])
  }
}
