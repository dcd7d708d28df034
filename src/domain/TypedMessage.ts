import { Either, ParseResult, Schema } from "effect"

const Label = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256))
const Url = Schema.String.pipe(Schema.pattern(/^https?:\/\/\S+$/), Schema.maxLength(2048))

const Button = Schema.Struct({
  label: Label,
  value: Schema.optional(Schema.String.pipe(Schema.maxLength(1024))),
  url: Schema.optional(Url)
})
const Buttons = Schema.Array(Button).pipe(Schema.minItems(1), Schema.maxItems(20))

/**
 * Payload schemas of the typed messages Parley knows (docs/typed-messages.md). Other renderer names
 * are accepted with any object payload.
 */
export const TypedPayloads = {
  buttons: Schema.Struct({ text: Schema.optional(Schema.String), buttons: Buttons }),
  card: Schema.Struct({
    title: Label,
    subtitle: Schema.optional(Schema.String),
    imageUrl: Schema.optional(Url),
    buttons: Schema.optional(Buttons)
  }),
  image: Schema.Struct({
    url: Url,
    alt: Schema.optional(Schema.String),
    width: Schema.optional(Schema.Int.pipe(Schema.positive())),
    height: Schema.optional(Schema.Int.pipe(Schema.positive()))
  }),
  location: Schema.Struct({
    latitude: Schema.Number.pipe(Schema.between(-90, 90)),
    longitude: Schema.Number.pipe(Schema.between(-180, 180)),
    name: Schema.optional(Schema.String),
    address: Schema.optional(Schema.String)
  }),
  tool_call: Schema.Struct({
    name: Label,
    callId: Schema.optional(Schema.String),
    arguments: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
    status: Schema.optional(Schema.Literal("pending", "running", "completed", "failed"))
  }),
  genui: Schema.Struct({
    component: Label,
    props: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown })),
    text: Schema.optional(Schema.String)
  }),
  interrupt: Schema.Struct({
    prompt: Schema.String.pipe(Schema.minLength(1)),
    options: Schema.optional(Schema.Array(Label).pipe(Schema.maxItems(20)))
  })
} as const

type Known = keyof typeof TypedPayloads

const isKnown = (name: string): name is Known => Object.hasOwn(TypedPayloads, name)

/** Renderer names: a letter, then letters, digits, `_`, `-` or `.`, at most 64 characters. */
export const MESSAGE_TYPE_NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/

/** Checks a typed payload; Left holds readable messages. */
export const checkPayload = (messageType: string, payload: Record<string, unknown>): Either.Either<void, Array<string>> => {
  if ("type" in payload || "seq" in payload) return Either.left(["must not carry type or seq"])
  if (!isKnown(messageType)) return Either.right(undefined)
  return Schema.decodeUnknownEither(TypedPayloads[messageType] as Schema.Schema<unknown>, { errors: "all" })(payload).pipe(
    Either.mapBoth({
      onLeft: (error) =>
        ParseResult.ArrayFormatter.formatErrorSync(error).map((issue) =>
          issue.path.length === 0 ? issue.message : `${issue.path.join(".")}: ${issue.message}`
        ),
      onRight: () => undefined
    })
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
