import { NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Layer, Schema, Stream } from "effect"
import { AppConfig } from "../../src/config/AppConfig.js"
import { ConversationId } from "../../src/domain/Conversation.js"
import { LoggingLive, NodeLive } from "../../src/NodeLive.js"
import { ConversationHub } from "../../src/realtime/ConversationHub.js"

/**
 * A whole node as a process (`node --import tsx test/support/ListenerNode.ts`) that also follows
 * the conversations in `LISTEN_TO` (comma-separated ids) through its hub, as the node's SSE and
 * socket listeners will, and prints `seen <conversation id> <seq>` for each activity it receives.
 */
const Listeners = Layer.scopedDiscard(Effect.gen(function*() {
  const hub = yield* ConversationHub
  const ids = (process.env["LISTEN_TO"] ?? "").split(",").filter((id) => id !== "").map((id) => Schema.decodeSync(ConversationId)(id))
  yield* Effect.forEach(ids, (id) =>
    Effect.forkScoped(Stream.runForEach(hub.subscribe(id, 0), (activity) => Console.log(`seen ${id} ${activity.seq}`))))
}))

NodeRuntime.runMain(
  Layer.launch(Listeners.pipe(Layer.provideMerge(NodeLive), Layer.provide(LoggingLive))).pipe(
    Effect.withTracerEnabled(false),
    Effect.provide(AppConfig.Default)
  ),
  { disablePrettyLogger: true }
)
