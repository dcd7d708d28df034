import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import type { WireError } from "./ApiError.js"

/** A replay of a delivery that is not a dead letter (server-apis.md "Delivery receipts"). */
export class NotFailed extends Schema.TaggedError<NotFailed>()("NotFailed", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 409 })) implements WireError {
  readonly code = "not_failed"
  readonly wireDetails = null
}

/** A channel route that only some channel types have (the `http_pull` outbox, templates). */
export class UnsupportedChannelType extends Schema.TaggedError<UnsupportedChannelType>()("UnsupportedChannelType", {
  message: Schema.String
}, HttpApiSchema.annotations({ status: 422 })) implements WireError {
  readonly code = "unsupported_channel_type"
  readonly wireDetails = null
}
