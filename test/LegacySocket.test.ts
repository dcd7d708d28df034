import { expect, layer } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import { chat, generateToken, tenantWithChannel } from "./support/ClientApi.js"
import { tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { eventsOf, join, phoenixSocket, push, rawSocket, replyTo, until } from "./support/PhoenixClients.js"
import { request, TestNodeLive } from "./support/TestNode.js"

const ENV = {
  TOKEN_SIGNING_KEY: "legacy-socket-test-key-0123456789abcdef01",
  TRUSTED_PROXIES: "127.0.0.1/32"
}

/** A token of the deprecated `POST /api/v1/tokens` for the conversation. */
const legacyToken = (secret: string, conversationId: string, userId: string) =>
  Effect.map(
    request("POST", "/api/v1/tokens", { headers: { "x-channel-token": secret }, body: { conversation_id: conversationId, user_id: userId } }),
    (reply) => {
      if (reply.status !== 201) throw new Error(`legacy token failed: ${reply.status} ${JSON.stringify(reply.body)}`)
      return reply.body.token as string
    }
  )

/** Appends over the tenant API; the stored activity. */
const append = (key: string, id: string, text: string) =>
  Effect.map(tenantApi(key, "POST", `/conversations/${id}/activities`, { text, sender: "bot-1" }), (reply) => {
    if (reply.status !== 201) throw new Error(`append failed: ${reply.status} ${JSON.stringify(reply.body)}`)
    return reply.body.data as { id: string; seq: number }
  })

const LEGACY_KEYS = [
  "attachments",
  "conversation_id",
  "deleted_at",
  "edited_at",
  "id",
  "inserted_at",
  "message_type",
  "metadata",
  "payload",
  "reply_to_id",
  "sender",
  "seq",
  "text",
  "type"
]

/** The deprecation warnings the node logged: their annotations. */
const warnings: Array<Record<string, unknown>> = []
const capture = Logger.make(({ annotations, message }) => {
  if (Array.isArray(message) && message[0] === "deprecated API used") warnings.push(Object.fromEntries(annotations))
})

layer(TestNodeLive({ ...ENV, LOG_LEVEL: "warning" }).pipe(Layer.provide(Logger.add(capture))), { excludeTestServices: true })("legacy socket /socket/websocket", (it) => {
  it.effect("a connection logs the deprecation warning for its channel (once a minute per channel, as every deprecated surface)", () =>
    Effect.gen(function*() {
      // A client-API token: the channel's first deprecated use is the socket itself.
      const { channel } = yield* tenantWithChannel
      const created = yield* chat("POST", "/conversations", { bearer: yield* generateToken(channel.secret, { user: { id: "u" } }) })
      const token = created.body.token as string
      const ofChannel = () => warnings.filter((w) => w["channel_id"] === channel.id)
      const first = yield* rawSocket("/socket/websocket", { token })
      first.send(JSON.stringify([null, "h", "phoenix", "heartbeat", {}]))
      expect((yield* replyTo(first, "h")).status).toBe("ok")
      expect(ofChannel()).toEqual([{ surface: "legacy socket /socket/websocket", channel_id: channel.id }])
      const second = yield* rawSocket("/socket/websocket", { token })
      second.send(JSON.stringify([null, "h", "phoenix", "heartbeat", {}]))
      expect((yield* replyTo(second, "h")).status).toBe("ok")
      expect(ofChannel()).toHaveLength(1)
      // The new binding logs nothing.
      const current = yield* rawSocket("/socket/chat/websocket", { token })
      current.send(JSON.stringify([null, "h", "phoenix", "heartbeat", {}]))
      expect((yield* replyTo(current, "h")).status).toBe("ok")
      expect(ofChannel()).toHaveLength(1)
    }).pipe(Effect.scoped))

  it.effect("the legacy token joins conversation:<id> from last_activity_id; activities arrive as new_activity in the legacy names; new_activity posts with idempotency_key", () =>
    Effect.gen(function*() {
      const { channel, conversationId, key } = yield* tenantWithConversation
      const first = yield* append(key, conversationId, "one")
      yield* append(key, conversationId, "two")
      const token = yield* legacyToken(channel.secret, conversationId, "user-1")
      const client = yield* phoenixSocket("/socket", { token })
      const topic = `conversation:${conversationId}`
      const legacyChannel = client.socket.channel(topic, { last_activity_id: first.id })
      expect(yield* join(legacyChannel)).toEqual({ status: "ok", response: {} })
      yield* until(() => eventsOf(client, topic, "new_activity").length === 1, "the activity after last_activity_id")
      const replayed = eventsOf(client, topic, "new_activity")[0]
      expect(Object.keys(replayed).sort()).toEqual(LEGACY_KEYS)
      expect(replayed).toMatchObject({ seq: 2, text: "two", sender: "bot-1", metadata: {}, conversation_id: conversationId })

      const posted = yield* push(legacyChannel, "new_activity", { text: "three", idempotency_key: "k-1" })
      expect(posted).toEqual({ status: "ok", response: { id: expect.any(String), seq: 3 } })
      expect(yield* push(legacyChannel, "new_activity", { text: "again", idempotency_key: "k-1" })).toEqual(posted)
      yield* until(() => eventsOf(client, topic, "new_activity").length === 2, "the posted activity arrives live")
      expect(eventsOf(client, topic, "new_activity")[1]).toMatchObject({ seq: 3, text: "three", sender: "user-1" })

      // The new names are not spoken here.
      expect(yield* push(legacyChannel, "postActivity", { text: "x" })).toEqual({ status: "error", response: { reason: "unknown_event" } })
      const wrongTopic = client.socket.channel(`chat:conversation:${conversationId}`, {})
      expect(yield* join(wrongTopic)).toEqual({ status: "error", response: { reason: "unmatched_topic" } })
    }).pipe(Effect.scoped))

  it.effect("a read from another legacy client arrives as delivery_status; the legacy token reaches only its conversation", () =>
    Effect.gen(function*() {
      const { channel, conversationId, key } = yield* tenantWithConversation
      const other = yield* tenantWithConversation
      yield* append(key, conversationId, "one")
      const reader = yield* rawSocket("/socket/websocket", { token: yield* legacyToken(channel.secret, conversationId, "user-1") })
      const watcher = yield* phoenixSocket("/socket", { token: yield* legacyToken(channel.secret, conversationId, "user-2") })
      const topic = `conversation:${conversationId}`
      expect((yield* join(watcher.socket.channel(topic, {}))).status).toBe("ok")
      reader.send(JSON.stringify(["1", "1", topic, "phx_join", {}]))
      expect((yield* replyTo(reader, "1")).status).toBe("ok")
      reader.send(JSON.stringify(["1", "2", topic, "read", { last_activity_id: 1 }]))
      expect(yield* replyTo(reader, "2")).toEqual({ status: "ok", response: {} })
      yield* until(() => eventsOf(watcher, topic, "delivery_status").length === 1, "the delivery status")
      expect(eventsOf(watcher, topic, "delivery_status")).toEqual([{ user_id: "user-1", status: "read", seq: 1 }])

      reader.send(JSON.stringify(["3", "3", `conversation:${other.conversationId}`, "phx_join", {}]))
      expect(yield* replyTo(reader, "3")).toEqual({ status: "error", response: { reason: "forbidden" } })
    }).pipe(Effect.scoped))
})
