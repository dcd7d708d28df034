import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import { Conflict } from "../domain/ApiError.js"
import { Channel, ChannelId, ChannelInput, ChannelWithSecret } from "../domain/Channel.js"
import { IfMatchHeaders } from "./AdminApi.js"
import { envelope } from "./ErrorEnvelope.js"
import { manageGroup } from "./ManageApi.js"

/** `/channels/:id`; a malformed id is 400. */
export const ChannelPath = Schema.Struct({ id: ChannelId })
const ChannelBody = Schema.Struct({ channel: ChannelInput })

const update = <const Name extends string>(endpoint: HttpApiEndpoint.HttpApiEndpoint<Name, "PUT" | "PATCH">) =>
  endpoint
    .setPath(ChannelPath)
    .setHeaders(IfMatchHeaders)
    .setPayload(ChannelBody)
    .addSuccess(Schema.Struct({ data: Channel }))
    .addError(envelope(Conflict))

/** A tenant's channels (`/api/v1/manage/channels`), server-apis.md "Management API". */
export class ChannelsApi extends manageGroup(
  HttpApiGroup.make("channels")
    .add(HttpApiEndpoint.get("listChannels", "/channels").addSuccess(Schema.Struct({ data: Schema.Array(Channel) })))
    .add(
      HttpApiEndpoint.post("createChannel", "/channels")
        .setPayload(ChannelBody)
        .addSuccess(Schema.Struct({ data: ChannelWithSecret }), { status: 201 })
    )
    .add(HttpApiEndpoint.get("getChannel", "/channels/:id").setPath(ChannelPath).addSuccess(Schema.Struct({ data: Channel })))
    .add(update(HttpApiEndpoint.put("putChannel", "/channels/:id")))
    .add(update(HttpApiEndpoint.patch("patchChannel", "/channels/:id")))
    .add(
      HttpApiEndpoint.del("deleteChannel", "/channels/:id")
        .setPath(ChannelPath)
        .setHeaders(IfMatchHeaders)
        .addSuccess(HttpApiSchema.NoContent)
    )
    .add(
      HttpApiEndpoint.post("rotateChannelSecret", "/channels/:id/rotate_secret")
        .setPath(ChannelPath)
        .addSuccess(Schema.Struct({ data: ChannelWithSecret }))
    )
) {}
