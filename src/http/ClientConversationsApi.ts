import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Schema } from "effect"
import {
  ConversationClosed,
  InvalidMessage,
  RateLimited,
  CredentialChannelInactive,
  Forbidden,
  InsufficientPermission,
  NotFound,
  OutcomeUnknown,
  Unauthorized,
  Unavailable
} from "../domain/ApiError.js"
import { ConversationId } from "../domain/Conversation.js"
import { ActivityFrame, ClientActivity, ClientActivityBody } from "./ClientActivityWire.js"
import { ClientAuth } from "./ClientAuth.js"
import { ConversationListItem } from "./ConversationListItem.js"
import { ConversationPath, statusChange } from "./ConversationEndpoints.js"
import { envelope } from "./ErrorEnvelope.js"
import { optionalBody } from "./OptionalBody.js"

/** client-api.md "Size and paging limits": a conversation `title`. */
const MAX_TITLE_BYTES = 200


export const CreateConversationBody = optionalBody({
  title: Schema.optional(
    Schema.String.pipe(Schema.filter((title) =>
      Buffer.byteLength(title, "utf8") <= MAX_TITLE_BYTES || `Expected at most ${MAX_TITLE_BYTES} bytes of UTF-8`
    ))
  )
})

const PageFields = {
  watermark: Schema.NullOr(Schema.Int),
  has_more: Schema.Boolean,
  /** Backward pages only: the `before` of the next older page, null at the first activity. */
  cursor: Schema.optional(Schema.NullOr(Schema.String))
}

/** A page of `GET …/activities`: activities (without `seq`), or with `format=frames` Protocol v1 frames. */
const ActivityPage = Schema.Union(
  Schema.Struct({ activities: Schema.Array(ClientActivity), ...PageFields }),
  Schema.Struct({ frames: Schema.Array(ActivityFrame), ...PageFields })
)

/** What create and reconnect answer: a token bound to the conversation and where to stream it. */
const ConversationSession = Schema.Struct({
  conversationId: ConversationId,
  token: Schema.String,
  expires_in: Schema.Int,
  streamUrl: Schema.String
})

/** The answer to a close or reopen: the conversation and its status now. */
const ClosedOrReopened = Schema.Struct({ conversationId: ConversationId, status: Schema.Literal("active", "closed") })

/** The conversation routes of the client API (client-api.md, `/api/v1/chat/conversations*`), Bearer client token. */
export class ClientConversationsApi extends HttpApiGroup.make("clientConversations")
  .add(
    HttpApiEndpoint.post("create", "/conversations")
      .setPayload(CreateConversationBody)
      .addSuccess(ConversationSession, { status: 201 })
  )
  .add(
    HttpApiEndpoint.get("list", "/conversations")
      .setUrlParams(Schema.Struct({
        limit: Schema.optional(Schema.String),
        cursor: Schema.optional(Schema.String),
        status: Schema.optional(Schema.Literal("active", "closed")),
        updated_since: Schema.optional(Schema.String)
      }))
      .addSuccess(Schema.Struct({
        conversations: Schema.Array(ConversationListItem),
        cursor: Schema.NullOr(Schema.String),
        has_more: Schema.Boolean
      }))
  )
  .add(
    HttpApiEndpoint.get("reconnect", "/conversations/:id")
      .setPath(ConversationPath)
      .setUrlParams(Schema.Struct({ watermark: Schema.optional(Schema.String) }))
      .addSuccess(ConversationSession)
  )
  .add(statusChange("close", "close", ClosedOrReopened))
  .add(statusChange("reopen", "reopen", ClosedOrReopened))
  .add(
    HttpApiEndpoint.post("postActivity", "/conversations/:id/activities")
      .setPath(ConversationPath)
      .setHeaders(Schema.Struct({ "x-idempotency-key": Schema.optional(Schema.String) }))
      .setPayload(ClientActivityBody)
      .addSuccess(Schema.Struct({ id: Schema.String }))
      .addError(envelope(InvalidMessage))
      .addError(envelope(RateLimited))
      .addError(envelope(OutcomeUnknown))
  )
  .add(
    HttpApiEndpoint.get("listActivities", "/conversations/:id/activities")
      .setPath(ConversationPath)
      .setUrlParams(Schema.Struct({
        watermark: Schema.optional(Schema.String),
        before: Schema.optional(Schema.String),
        direction: Schema.optional(Schema.Literal("forward", "backward")),
        format: Schema.optional(Schema.Literal("activities", "frames")),
        userId: Schema.optional(Schema.String),
        limit: Schema.optional(Schema.String)
      }))
      .addSuccess(ActivityPage)
  )
  .addError(envelope(Unauthorized))
  .addError(envelope(CredentialChannelInactive))
  .addError(envelope(Forbidden))
  .addError(envelope(InsufficientPermission))
  .addError(envelope(NotFound))
  .addError(envelope(ConversationClosed))
  .addError(envelope(Unavailable))
  .middleware(ClientAuth)
  .prefix("/api/v1/chat")
{}
