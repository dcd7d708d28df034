import { Entity } from "@effect/cluster"
import { Effect, Stream } from "effect"
import { Unavailable } from "../src/domain/ApiError.js"
import { ConversationCores } from "./ConversationCores.js"
import { ConversationEntity } from "./ConversationEntity.js"

/**
 * The shard moved while the command waited: the caller sends it again and reaches the new owner.
 * Before its deadline this is the entity's only `cluster_unavailable` answer (Conversations relies on it).
 */
export const moved = () =>
  Effect.fail(
    new Unavailable({ message: "the conversation moved to another node, retry", reason: "cluster_unavailable", retry_after_ms: 250 })
  )

/**
 * The conversation entity: the cluster's way to reach a conversation's core on the node that owns
 * it (see `ConversationCores`; the core holds the logic and state).
 */
export const ConversationEntityLive = ConversationEntity.toLayer(
  Effect.gen(function*() {
    const conversationId = (yield* Entity.CurrentAddress).entityId
    const cores = yield* ConversationCores
    const core = cores.get(conversationId)
    return ConversationEntity.of({
      Append: ({ payload }) => Effect.flatMap(core, (c) => c.append(payload)).pipe(Effect.catchTag("Moved", moved)),
      SetStatus: ({ payload }) => Effect.flatMap(core, (c) => c.setStatus(payload)).pipe(Effect.catchTag("Moved", moved)),
      Subscribe: ({ payload }) => Stream.unwrap(Effect.map(core, (c) => c.subscribe(payload.fromSeq)))
    })
  }),
  { concurrency: "unbounded" }
)
