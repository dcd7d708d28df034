import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { orUnavailable } from "../db/SqlFailure.js"
import type { ConversationId } from "../domain/Conversation.js"

/** How far each end user has read each conversation; a position only moves forward. */
export class ReadPositions extends Effect.Service<ReadPositions>()("parley/ReadPositions", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    /** Records that `userId` read up to `seq`; the stored position after it (never lower than before). */
    const advance = (conversationId: ConversationId, userId: string, seq: number) =>
      sql<{ seq: string }>`
        INSERT INTO read_positions (conversation_id, user_id, seq) VALUES (${conversationId}, ${userId}, ${seq})
        ON CONFLICT (conversation_id, user_id) DO UPDATE
          SET seq = GREATEST(read_positions.seq, EXCLUDED.seq), updated_at = now()
        RETURNING seq`.pipe(
        orUnavailable,
        Effect.map((rows) => Number(rows[0]!.seq))
      )

    /** Where `userId` has read up to (0 when never). */
    const positionOf = (conversationId: ConversationId, userId: string) =>
      sql<{ seq: string }>`SELECT seq FROM read_positions WHERE conversation_id = ${conversationId} AND user_id = ${userId}`.pipe(
        orUnavailable,
        Effect.map((rows) => rows.length === 0 ? 0 : Number(rows[0]!.seq))
      )

    return { advance, positionOf } as const
  })
}) {}
