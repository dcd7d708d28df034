import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import { NotFound, Unavailable, ValidationFailed } from "../domain/ApiError.js"
import {
  NewPublishableKeyInput,
  PublishableKey,
  PublishableKeyInput,
  PublishableKeyWithKey
} from "../domain/PublishableKey.js"
import { ManageAuth } from "./TenantAuth.js"
import { ChannelPath } from "./ChannelsApi.js"
import { envelope } from "./ErrorEnvelope.js"

const KeyPath = Schema.Struct({ ...ChannelPath.fields, key_id: Schema.UUID })

/** Publishable keys of a channel (`/api/v1/manage/channels/:id/publishable_keys`), CONTRACT.md §3. */
export class PublishableKeysApi extends HttpApiGroup.make("publishableKeys")
  .add(
    HttpApiEndpoint.get("listPublishableKeys", "/channels/:id/publishable_keys")
      .setPath(ChannelPath)
      .addSuccess(Schema.Struct({ data: Schema.Array(PublishableKey) }))
  )
  .add(
    HttpApiEndpoint.post("createPublishableKey", "/channels/:id/publishable_keys")
      .setPath(ChannelPath)
      .setPayload(Schema.Struct({ publishable_key: NewPublishableKeyInput }))
      .addSuccess(Schema.Struct({ data: PublishableKeyWithKey }), { status: 201 })
  )
  .add(
    HttpApiEndpoint.patch("updatePublishableKey", "/channels/:id/publishable_keys/:key_id")
      .setPath(KeyPath)
      .setPayload(Schema.Struct({ publishable_key: PublishableKeyInput }))
      .addSuccess(Schema.Struct({ data: PublishableKey }))
  )
  .add(
    HttpApiEndpoint.post("rotatePublishableKey", "/channels/:id/publishable_keys/:key_id/rotate")
      .setPath(KeyPath)
      .addSuccess(Schema.Struct({ data: PublishableKeyWithKey }))
  )
  .add(
    HttpApiEndpoint.del("deletePublishableKey", "/channels/:id/publishable_keys/:key_id")
      .setPath(KeyPath)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .addError(envelope(NotFound))
  .addError(envelope(ValidationFailed))
  .addError(envelope(Unavailable))
  .middleware(ManageAuth)
  .prefix("/api/v1/manage")
{}
