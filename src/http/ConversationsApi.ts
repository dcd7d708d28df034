import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Schema } from "effect"
import { Activity } from "../domain/Activity.js"
import {
  BadRequest,
  ConversationClosed,
  InsufficientScope,
  InvalidMessage,
  InvalidWatermark,
  NotFound,
  OutcomeUnknown,
  RateLimited,
  Unavailable
} from "../domain/ApiError.js"
import { Conversation } from "../domain/Conversation.js"
import { TenantAuth, TenantKeyAuth } from "./TenantAuth.js"
import { ConversationPath, statusChange } from "./ConversationEndpoints.js"
import { envelope } from "./ErrorEnvelope.js"


/** Every field is checked by the activity rules, so wrong types are 422 `invalid_message`. */
export const ActivityBody = Schema.Struct({
  type: Schema.optional(Schema.Unknown),
  text: Schema.optional(Schema.Unknown),
  attachments: Schema.optional(Schema.Unknown),
  metadata: Schema.optional(Schema.Unknown),
  reply_to_id: Schema.optional(Schema.Unknown),
  message_type: Schema.optional(Schema.Unknown),
  payload: Schema.optional(Schema.Unknown),
  sender: Schema.optional(Schema.Unknown)
})

/** The answer to an append: 201 with the stored activity. */
const ActivityCreated = Schema.Struct({ data: Activity })

const PageMeta = Schema.Struct({ next_cursor: Schema.NullOr(Schema.String), has_more: Schema.Boolean, limit: Schema.Int })
const WatermarkMeta = Schema.Struct({ watermark: Schema.NullOr(Schema.Int), has_more: Schema.Boolean, limit: Schema.Int })

/** The answer to a close or reopen: the conversation as it is now. */
const ConversationData = Schema.Struct({ data: Conversation })

/** Conversation routes of the tenant API that take `x-api-key` or the deprecated `x-channel-token`. */
export class ConversationsApi extends HttpApiGroup.make("conversations")
  .add(HttpApiEndpoint.get("get", "/conversations/:id").setPath(ConversationPath).addSuccess(Schema.Struct({ data: Conversation })))
  .add(statusChange("close", "close", ConversationData))
  .add(statusChange("reopen", "reopen", ConversationData))
  .add(
    HttpApiEndpoint.post("appendActivity", "/conversations/:id/activities")
      .setPath(ConversationPath)
      .setHeaders(Schema.Struct({ "x-idempotency-key": Schema.optional(Schema.String) }))
      .setPayload(ActivityBody)
      .addSuccess(ActivityCreated, { status: 201 })
      .addError(envelope(OutcomeUnknown))
  )
  .add(
    HttpApiEndpoint.get("listActivities", "/conversations/:id/activities")
      .setPath(ConversationPath)
      .setUrlParams(Schema.Struct({ limit: Schema.optional(Schema.String), watermark: Schema.optional(Schema.String) }))
      .addSuccess(Schema.Struct({ data: Schema.Array(Activity), meta: WatermarkMeta }))
  )
  .addError(envelope(NotFound))
  .addError(envelope(BadRequest))
  .addError(envelope(InvalidMessage))
  .addError(envelope(InvalidWatermark))
  .addError(envelope(ConversationClosed))
  .addError(envelope(InsufficientScope))
  .addError(envelope(RateLimited))
  .addError(envelope(Unavailable))
  .middleware(TenantAuth)
  .prefix("/api/v1")
{}

/** `GET /conversations`: `x-api-key` only. */
export class ConversationListApi extends HttpApiGroup.make("conversationList")
  .add(
    HttpApiEndpoint.get("list", "/conversations")
      .setUrlParams(Schema.Struct({
        limit: Schema.optional(Schema.String),
        cursor: Schema.optional(Schema.String),
        status: Schema.optional(Schema.String),
        channel_id: Schema.optional(Schema.String),
        external_id: Schema.optional(Schema.String)
      }))
      .addSuccess(Schema.Struct({ data: Schema.Array(Conversation), meta: PageMeta }))
  )
  .addError(envelope(BadRequest))
  .addError(envelope(InsufficientScope))
  .addError(envelope(Unavailable))
  .middleware(TenantKeyAuth)
  .prefix("/api/v1")
{}
