import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import {
  BadRequest,
  CredentialChannelInactive,
  Forbidden,
  InsufficientPermission,
  NotFound,
  Unauthorized,
  Unavailable
} from "../domain/ApiError.js"
import { ConversationId } from "../domain/Conversation.js"
import { ClientAuth } from "./ClientAuth.js"
import { envelope } from "./ErrorEnvelope.js"

/**
 * The event stream of the client API as the OpenAPI document shows it. It is served by the raw route
 * of `SseRoute` (a stream that outlives the handler), never built from this group, as the upload
 * routes are (ADR 0026); docs/realtime/sse.md describes the events.
 */
export class ClientEventsApi extends HttpApiGroup.make("clientEvents")
  .add(
    HttpApiEndpoint.get("events", "/conversations/:conversation_id/events")
      .setPath(Schema.Struct({ conversation_id: ConversationId }))
      .setUrlParams(Schema.Struct({
        token: Schema.optional(Schema.String).annotations({ description: "The token, for clients that cannot send Authorization (EventSource); never logged" }),
        watermark: Schema.optional(Schema.String).annotations({ description: "Resume after this position (any accepted watermark form); Last-Event-ID wins" }),
        userId: Schema.optional(Schema.String).annotations({ description: "Whose activities are from=user when the token has no user_id" })
      }))
      .setHeaders(Schema.Struct({
        "last-event-id": Schema.optional(Schema.String).annotations({ description: "The id (seq) of the last event received" })
      }))
      .addSuccess(
        HttpApiSchema.Text({ contentType: "text/event-stream" }).annotations({
          description: "retry: 3000, then one event per Protocol v1 frame: event = frame type, id = seq on activity frames, data = the frame's JSON"
        })
      )
      .addError(envelope(BadRequest))
      .addError(envelope(Unauthorized))
      .addError(envelope(CredentialChannelInactive))
      .addError(envelope(Forbidden))
      .addError(envelope(InsufficientPermission))
      .addError(envelope(NotFound))
      .addError(envelope(Unavailable))
  )
  .middleware(ClientAuth)
  .prefix("/api/v1/chat")
{}
