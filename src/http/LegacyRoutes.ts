import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import type * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Data, Effect, Predicate, Schema } from "effect"
import { ChannelTokens, invalidChannelToken } from "../auth/ChannelTokens.js"
import { ClientTokens } from "../auth/ClientTokens.js"
import { AppConfig } from "../config/AppConfig.js"
import { Conversations } from "../conversations/Conversations.js"
import { BadRequest, ChannelInactive, Forbidden, Unauthorized } from "../domain/ApiError.js"
import { Characters } from "../domain/Characters.js"
import { ConversationId } from "../domain/Conversation.js"
import { findUnstorable } from "../domain/Unstorable.js"
import { RateLimiter } from "../ratelimit/RateLimiter.js"
import { clientAddress } from "./ClientAddress.js"
import { DeprecationWarnings } from "./DeprecationWarnings.js"
import { isBodyTooLarge, isJsonContentType, MAX_JSON_DEPTH, nestsDeeperThan } from "./EdgeRules.js"
import type { RouteSpec } from "./RouteTable.js"

/** The deprecated routes that take only `x-channel-token`, for the route table. */
export const legacyRoutes: ReadonlyArray<RouteSpec> = [
  { method: "POST", path: "/api/v1/tokens" },
  { method: "POST", path: "/api/v1/conversations" }
]

const MAX_USER_ID_CHARS = 256

const TokenRequest = Schema.Struct({
  conversation_id: ConversationId,
  user_id: Characters(1, MAX_USER_ID_CHARS)
})

const CreateConversationRequest = Schema.Struct({
  status: Schema.optionalWith(Schema.Literal("active", "closed"), { default: () => "active" as const }),
  metadata: Schema.optionalWith(Schema.Record({ key: Schema.String, value: Schema.Unknown }), { default: () => ({}) })
})

export const INVALID_CREATE_BODY = "invalid body: a JSON object whose status is active or closed, metadata an object"

/** A body that is not JSON of the expected shape (or not JSON at all). */
class InvalidBody extends Data.TaggedError("InvalidBody")<{}> {}

/**
 * The JSON body decoded by `schema` (empty reads as `{}`), under the edge's body rules answered here,
 * as this route maps every bad body to 401. `stored` picks what must be stored exactly as sent.
 */
const jsonBody = <A, I>(schema: Schema.Schema<A, I>, stored: (json: unknown) => unknown = () => undefined) =>
  HttpServerRequest.HttpServerRequest.pipe(
    Effect.flatMap((request): Effect.Effect<string, InvalidBody | HttpServerError.RequestError> =>
      isJsonContentType(request.headers["content-type"]) ? request.text : Effect.fail(new InvalidBody())
    ),
    Effect.filterOrFail((text) => !nestsDeeperThan(text, MAX_JSON_DEPTH), () => new InvalidBody()),
    Effect.flatMap((text) => Schema.decodeUnknown(Schema.parseJson())(text.trim() === "" ? "{}" : text)),
    Effect.filterOrFail((json) => findUnstorable(stored(json)) === undefined, () => new InvalidBody()),
    Effect.flatMap(Schema.decodeUnknown(schema)),
    Effect.catchTag("ParseError", () => Effect.fail(new InvalidBody()))
  )

/** The `metadata` of a create body as sent, the part of it a conversation stores. */
const metadataOf = (json: unknown): unknown => (Predicate.isRecord(json) ? json["metadata"] : undefined)

/** The channel secret of the request; without one, 400 `bad_request`. */
const channelSecret = Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
  const secret = request.headers["x-channel-token"]
  return secret === undefined || secret === ""
    ? Effect.fail(new BadRequest({ message: "missing x-channel-token" }))
    : Effect.succeed(secret)
})

/**
 * The deprecated `POST /api/v1/tokens` and `POST /api/v1/conversations` (server-apis.md): raw routes, as
 * their error mapping is not HttpApi's, so they are not in the OpenAPI document.
 */
export const LegacyRoutes = HttpLayerRouter.addAll(Effect.gen(function*() {
  const config = yield* AppConfig
  const tokens = yield* ChannelTokens
  const conversations = yield* Conversations
  const limiter = yield* RateLimiter
  const clientTokens = yield* ClientTokens
  const warnings = yield* DeprecationWarnings

  /** A conversation-bound token for the legacy socket; the conversation must be on the token's channel. */
  const createToken = Effect.gen(function*() {
    const secret = yield* channelSecret
    const request = yield* HttpServerRequest.HttpServerRequest
    // Counted before the secret is looked up, so guessing secrets is limited too.
    yield* limiter.consume("token_create", clientAddress(request, config.trustedProxies), null)
    const channel = yield* tokens.authenticate(secret)
    yield* warnings.warn("POST /api/v1/tokens", channel.id)
    // The user id becomes the sender of what the token's holder posts: unstorable text is refused.
    const body = yield* jsonBody(TokenRequest, (json) => (Predicate.isRecord(json) ? json["user_id"] : undefined)).pipe(
      Effect.catchTag("InvalidBody", () =>
        Effect.fail(new BadRequest({ message: `conversation_id (a UUID) and user_id (1 to ${MAX_USER_ID_CHARS} characters) are required` })))
    )
    const conversation = yield* conversations.get({ tenantId: channel.tenant_id, channelId: null }, body.conversation_id, { channels: false })
    if (conversation.channel_id !== channel.id) {
      return yield* new Forbidden({ message: "the conversation belongs to another channel" })
    }
    const issued = yield* clientTokens.legacy(channel, conversation.id, body.user_id)
    return HttpServerResponse.unsafeJson({ token: issued.token, expires_in: issued.expiresIn }, { status: 201 })
  })

  /** A conversation on the token's channel (its origin); any bad body is 401, as the spec maps it. */
  const createConversation = Effect.gen(function*() {
    const channel = yield* tokens.authenticate(yield* channelSecret).pipe(
      // This route's own mapping (server-apis.md): 400, where the rule for a token's channel is 403.
      Effect.catchTag("CredentialChannelInactive", ({ message }) => Effect.fail(new ChannelInactive({ message })))
    )
    yield* warnings.warn("POST /api/v1/conversations", channel.id)
    const body = yield* jsonBody(CreateConversationRequest, metadataOf).pipe(
      // A body over the size limit is an invalid body too (its rest is never read).
      Effect.catchIf((e) => e._tag === "RequestError" && isBodyTooLarge(e), () => Effect.fail(new InvalidBody())),
      Effect.catchTag("InvalidBody", () =>
        Effect.fail(new Unauthorized({ message: INVALID_CREATE_BODY })))
    )
    const data = yield* conversations.create({
      tenantId: channel.tenant_id,
      channelId: channel.id,
      status: body.status,
      metadata: body.metadata
    }).pipe(
      // A value the database refuses (a NUL character in the metadata) is a bad body too.
      Effect.catchTag("BadRequest", () => Effect.fail(new Unauthorized({ message: "invalid body: metadata cannot be stored" }))),
      // The channel was deleted after its token was checked: the 401 of a missing channel
      // (server-apis.md, "channel not found"). Deactivated meanwhile: 400 channel_inactive, as above.
      Effect.catchTag("NotFound", () => Effect.fail(invalidChannelToken()))
    )
    return HttpServerResponse.unsafeJson({ data }, { status: 201 })
  })

  return [
    HttpLayerRouter.route("POST", "/api/v1/tokens", createToken),
    HttpLayerRouter.route("POST", "/api/v1/conversations", createConversation)
  ]
}))
