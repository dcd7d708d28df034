import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Option } from "effect"
import { Channels, type IssuedChannelSecret } from "../channels/Channels.js"
import type { ChannelId, ChannelInput } from "../domain/Channel.js"
import { CurrentCredential, keyGoneWithTenant } from "./TenantAuth.js"
import { withETag } from "./ETag.js"
import { ParleyApi } from "./ParleyApi.js"

// The secret is shown once; the ETag is the channel's own, the one If-Match is checked against.
const withSecret = ({ channel, secret }: IssuedChannelSecret) => withETag({ ...channel, secret }, channel)

/** The `channels` group: the tenant comes from the management key, never from the request. */
export const ChannelsHandlers = HttpApiBuilder.group(ParleyApi, "channels", (handlers) =>
  Effect.gen(function*() {
    const channels = yield* Channels
    const update = ({ headers, path, payload }: {
      readonly path: { readonly id: ChannelId }
      readonly headers: { readonly "if-match"?: string | undefined }
      readonly payload: { readonly channel: ChannelInput }
    }) =>
      CurrentCredential.pipe(
        Effect.flatMap(({ actor, tenantId }) =>
          channels.update(tenantId, path.id, payload.channel, Option.fromNullable(headers["if-match"]), actor)
        ),
        Effect.flatMap(withETag)
      )
    return handlers
      .handle("listChannels", () =>
        CurrentCredential.pipe(
          Effect.flatMap(({ tenantId }) => channels.list(tenantId)),
          Effect.flatMap((data) => withETag(data))
        ))
      .handle("createChannel", ({ payload }) =>
        CurrentCredential.pipe(
          Effect.flatMap(({ actor, tenantId }) => channels.create(tenantId, payload.channel, actor).pipe(keyGoneWithTenant)),
          Effect.flatMap(withSecret)
        ))
      .handle("getChannel", ({ path }) =>
        CurrentCredential.pipe(
          Effect.flatMap(({ tenantId }) => channels.get(tenantId, path.id)),
          Effect.flatMap(withETag)
        ))
      .handle("putChannel", update)
      .handle("patchChannel", update)
      .handle("deleteChannel", ({ headers, path }) =>
        CurrentCredential.pipe(
          Effect.flatMap(({ actor, tenantId }) =>
            channels.remove(tenantId, path.id, Option.fromNullable(headers["if-match"]), actor)
          )
        ))
      .handle("rotateChannelSecret", ({ path }) =>
        CurrentCredential.pipe(
          Effect.flatMap(({ actor, tenantId }) => channels.rotateSecret(tenantId, path.id, actor)),
          Effect.flatMap(withSecret)
        ))
  }))
