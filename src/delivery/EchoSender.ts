import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { Conversations } from "../conversations/Conversations.js"
import { conversationIdOf } from "../domain/Conversation.js"
import { type DeliverySender, Outcome } from "./DeliverySender.js"

/** Failures of the append that a later attempt can get past (the owner moved, the database was away). */
const TRANSIENT = new Set(["Unavailable", "WriteOutcomeUnknown", "MailboxFull", "AlreadyProcessingMessage", "PersistenceError"])

const sent = Outcome.Sent({ providerMessageId: Option.none() })

/**
 * The `echo` channel type: a message delivered to it is answered in its conversation with the same
 * `text`, from sender `echo`, with `source_channel_id` the echo channel, through the REST append path.
 * It never answers an activity that came from an echo channel (two echo channels would answer each
 * other forever), nor anything but a message with text. The idempotency key is the delivery's id, so
 * a delivery sent twice (at least once) is answered once.
 */
export const makeEchoSender = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const conversations = yield* Conversations

  const fromEchoChannel = (sourceChannelId: unknown) =>
    typeof sourceChannelId !== "string"
      ? Effect.succeed(false)
      : Effect.map(
        sql<{ type: string }>`SELECT type FROM channels WHERE id = ${sourceChannelId}`,
        (rows) => rows[0]?.type === "echo"
      )

  const send: DeliverySender["send"] = (delivery, channel) => {
    const { payload } = delivery
    const text = payload["text"]
    if (payload["type"] !== "message" || typeof text !== "string" || text.length === 0) return Effect.succeed(sent)
    return fromEchoChannel(payload["source_channel_id"]).pipe(
      Effect.flatMap((echoed) =>
        echoed ? Effect.succeed(sent) : conversations.append(
          { tenantId: channel.tenantId, channelId: null },
          conversationIdOf(delivery.conversationId),
          { type: "message", text, sender: "echo" },
          {
            idempotencyKey: `echo:${delivery.id}`,
            sourceChannelId: channel.id,
            arrivedAt: Date.now()
          }
        ).pipe(Effect.as(sent))
      ),
      Effect.catchAll((error) =>
        Effect.succeed(
          error._tag === "SqlError" || TRANSIENT.has(error._tag)
            ? Outcome.Retry({ afterMs: Option.none(), error: `echo append: ${error._tag}` })
            : Outcome.Permanent({ error: `echo append refused: ${error._tag}` })
        )
      )
    )
  }
  return { send } satisfies DeliverySender
})
