import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import * as Multipart from "@effect/platform/Multipart"
import * as OpenApi from "@effect/platform/OpenApi"
import { Schema } from "effect"
import {
  ConversationClosed,
  Forbidden,
  InsufficientPermission,
  InvalidMessage,
  NotFound,
  PayloadTooLarge,
  RateLimited,
  StorageUnavailable,
  UnsupportedMediaType
} from "../domain/ApiError.js"
import { ConversationId } from "../domain/Conversation.js"
import { ClientAuth } from "./ClientAuth.js"
import { envelope } from "./ErrorEnvelope.js"

/** What the download answers beside its bytes (api-notes.md "Uploads"). */
const downloadHeaders = {
  "Content-Disposition": {
    description: "attachment; filename=\"<ASCII stand-in>\"; filename*=UTF-8''<exact name> (RFC 6266)",
    schema: { type: "string" }
  },
  "X-Content-Type-Options": { schema: { type: "string", enum: ["nosniff"] } }
}

/**
 * The upload routes of the client API as the OpenAPI document shows them. They are served by the raw
 * routes of `UploadRoutes` (streamed form, counted bytes), never built from this group (ADR 0026).
 */
export class ClientUploadsApi extends HttpApiGroup.make("clientUploads")
  .add(
    HttpApiEndpoint.post("upload", "/conversations/:id/upload")
      .setPath(Schema.Struct({ id: ConversationId }))
      .setPayload(HttpApiSchema.Multipart(Schema.Struct({
        file: Multipart.FileSchema,
        text: Schema.optional(Schema.String)
      })))
      .addSuccess(
        Schema.Struct({
          id: Schema.String,
          attachment: Schema.Struct({ contentType: Schema.String, contentUrl: Schema.String, name: Schema.String, size: Schema.Int })
        }),
        { status: 201 }
      )
      .addError(envelope(InsufficientPermission))
      .addError(envelope(Forbidden))
      .addError(envelope(NotFound))
      .addError(envelope(ConversationClosed))
      .addError(envelope(PayloadTooLarge))
      .addError(envelope(UnsupportedMediaType))
      .addError(envelope(InvalidMessage))
      .addError(envelope(RateLimited))
      .addError(envelope(StorageUnavailable))
  )
  .add(
    HttpApiEndpoint.get("download", "/attachments/:id")
      .setPath(Schema.Struct({ id: Schema.UUID }))
      .addSuccess(HttpApiSchema.Uint8Array())
      .addError(envelope(InsufficientPermission))
      .addError(envelope(NotFound))
      // The answer's Content-Type is the type sniffed at upload, so any type: `*/*`, not octet-stream.
      .annotate(OpenApi.Transform, (operation) => ({
        ...operation,
        responses: {
          ...operation["responses"],
          200: {
            description: "The file's bytes, with the type sniffed at upload as Content-Type",
            content: { "*/*": operation["responses"][200].content["application/octet-stream"] },
            headers: downloadHeaders
          }
        }
      }))
  )
  .middleware(ClientAuth)
  .prefix("/api/v1/chat")
{}
