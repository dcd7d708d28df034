import { Sharding } from "@effect/cluster"
import { Effect, Layer } from "effect"
import { ConversationEntity } from "../../cluster/ConversationEntity.js"
import { ConversationOwnersLive } from "../../cluster/ConversationOwnersLive.js"

/** A client of one conversation entity, as the cluster makes it. */
export type ConversationClient = ReturnType<Effect.Effect.Success<typeof ConversationEntity.client>>

/**
 * The node's cluster, except that calls of `method` on conversation entity clients go to what
 * `replace` makes of the entity's real client (and its id): a way to make the cluster fail or re-send as it does
 * when an owner stops or crashes, without stopping one. Every other call is the real one. The
 * conversations' owners are reached through this cluster too.
 */
export const overrideConversationCall = (
  method: keyof ConversationClient,
  // The proxy hands out whatever this makes: the client's own method types are generic over options.
  replace: (real: ConversationClient, entityId: string) => unknown
) =>
  Layer.effect(
    Sharding.Sharding,
    Effect.gen(function*() {
      const sharding = yield* Sharding.Sharding
      const conversations = yield* sharding.makeClient(ConversationEntity)
      return Sharding.Sharding.of({
        ...sharding,
        makeClient: (entity) =>
          Effect.map(sharding.makeClient(entity), (client) => (entityId: string) =>
            new Proxy(client(entityId), {
              get: (target, key, receiver) =>
                entity.type === ConversationEntity.type && key === method
                  ? replace(conversations(entityId), entityId)
                  : Reflect.get(target, key, receiver)
            }))
      })
    })
  ).pipe((sharding) => Layer.provideMerge(ConversationOwnersLive, sharding))
