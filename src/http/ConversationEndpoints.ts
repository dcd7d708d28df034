import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import { Schema } from "effect"
import { OutcomeUnknown } from "../domain/ApiError.js"
import { ConversationId } from "../domain/Conversation.js"
import { envelope } from "./ErrorEnvelope.js"

/** The `:id` of a conversation route, decoded lower-case (ADR 0024). */
export const ConversationPath = Schema.Struct({ id: ConversationId })

/** `POST /conversations/:id/close` or `/reopen`; each API answers with its own shape of the result. */
export const statusChange = <const Name extends string, A, I>(
  name: Name,
  action: "close" | "reopen",
  success: Schema.Schema<A, I>
) =>
  HttpApiEndpoint.post(name, `/conversations/:id/${action}`)
    .setPath(ConversationPath)
    .addSuccess(success)
    .addError(envelope(OutcomeUnknown))
