import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import type { Socket as TcpSocket } from "node:net"
import { encodeWatermark } from "../src/domain/Watermark.js"
import { Lifecycle } from "../src/ops/Lifecycle.js"
import { LiveConnections } from "../src/realtime/LiveConnections.js"
import { chat, generateToken, tenantWithChannel } from "./support/ClientApi.js"
import { insertChannel, insertConversation } from "./support/Fixtures.js"
import { eventsOf, join, leave, phoenixSocket, push, type RawClient, rawSocket, replyTo, until, upgradeAnswer } from "./support/PhoenixClients.js"
import { type TcpProxy, tcpProxy } from "./support/TcpProxy.js"
import { query, TestDatabase, TestDatabaseLive } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

const ENV = {
  TOKEN_SIGNING_KEY: "phoenix-socket-test-key-0123456789abcdef",
  TRUSTED_PROXIES: "127.0.0.1/32",
  RATE_LIMITS: JSON.stringify({ activity_create: { limit: 100_000, scale_ms: 1000 } })
}

/** A new conversation of a new channel, its bound token (user alice) and the channel's secret. */
const conversation = (tokenBody: unknown = { user: { id: "alice" } }) =>
  Effect.gen(function*() {
    const { channel, tenant } = yield* tenantWithChannel
    const parent = yield* generateToken(channel.secret, tokenBody)
    const reply = yield* chat("POST", "/conversations", { bearer: parent })
    if (reply.status !== 201) throw new Error(`create failed: ${reply.status} ${JSON.stringify(reply.body)}`)
    return { tenant, channel, parent, id: reply.body.conversationId as string, token: reply.body.token as string }
  })

/** Posts over REST; the stored activity's id. */
const restPost = (token: string, id: string, text: string) =>
  Effect.map(chat("POST", `/conversations/${id}/activities`, { bearer: token, body: { text } }), (reply) => {
    if (reply.status !== 200) throw new Error(`post failed: ${reply.status} ${JSON.stringify(reply.body)}`)
    return reply.body.id as string
  })

const topicOf = (id: string) => `chat:conversation:${id}`

/** The texts of every activitySet received on the topic, in order. */
const textsOn = (recorded: Parameters<typeof eventsOf>[0], topic: string) =>
  eventsOf(recorded, topic, "activitySet").flatMap((set) => set.activities.map((a: any) => a.text))
const seqsOn = (recorded: Parameters<typeof eventsOf>[0], topic: string) =>
  eventsOf(recorded, topic, "activitySet").flatMap((set) => set.activities.map((a: any) => a.seq))

layer(TestNodeLive(ENV), { excludeTestServices: true })("Phoenix binding", (it) => {
  describe("upgrade", () => {
    it.effect("a vsn other than 2.0.0 is refused 400 bad_request before the upgrade", () =>
      Effect.gen(function*() {
        const { token } = yield* conversation()
        expect(yield* upgradeAnswer("/socket/chat/websocket", { token, vsn: "1.0.0" })).toEqual({
          status: 400,
          body: { error: { code: "bad_request", message: expect.any(String), details: null, request_id: expect.any(String) } }
        })
        expect(yield* upgradeAnswer("/socket/chat/websocket", { token })).toBe("open")
        const accepted = yield* rawSocket("/socket/chat/websocket", { token, vsn: "2.0.0" })
        expect(accepted.ws.readyState).toBe(1)
      }).pipe(Effect.scoped))
  })

  describe("conversation topic", () => {
    it.effect("connect, join with replay, push postActivity, receive another client's activity, leave, rejoin from the last watermark without duplicates", () =>
      Effect.gen(function*() {
        const { id, token } = yield* conversation()
        yield* restPost(token, id, "one")
        yield* restPost(token, id, "two")
        const alice = yield* phoenixSocket("/socket/chat", { token, vsn: "2.0.0" })
        const topic = topicOf(id)
        const channel = alice.socket.channel(topic, {})
        expect(yield* join(channel)).toEqual({ status: "ok", response: {} })
        yield* until(() => eventsOf(alice, topic, "activitySet").length === 1, "the replay")
        const replay = eventsOf(alice, topic, "activitySet")[0]
        expect(replay).toEqual({ activities: [expect.any(Object), expect.any(Object)], watermark: encodeWatermark(2), has_more: false })
        expect(replay.activities[0]).toMatchObject({ seq: 1, text: "one", type: "message", from: { id: "alice" }, conversationId: id, channelData: {} })
        expect(Object.keys(replay.activities[0]).sort()).toEqual(
          ["attachments", "channelData", "conversationId", "deletedAt", "editedAt", "from", "id", "messageType", "payload", "replyToId", "seq", "text", "timestamp", "type"]
        )

        const posted = yield* push(channel, "postActivity", { text: "three", clientId: "c-1" })
        expect(posted).toEqual({ status: "ok", response: { id: expect.any(String), seq: 3, watermark: encodeWatermark(3) } })
        const again = yield* push(channel, "postActivity", { text: "three again", clientId: "c-1" })
        expect(again).toEqual(posted)

        // Another client (another token of the same conversation) posts; alice hears it live.
        const bob = yield* phoenixSocket("/socket/chat", { token })
        const bobChannel = bob.socket.channel(topic, { watermark: encodeWatermark(3) })
        expect((yield* join(bobChannel)).status).toBe("ok")
        expect(yield* push(bobChannel, "postActivity", { text: "four" })).toMatchObject({ status: "ok", response: { seq: 4 } })
        yield* until(() => seqsOn(alice, topic).includes(4) && seqsOn(bob, topic).includes(4), "both hear four")
        expect(textsOn(alice, topic)).toEqual(["one", "two", "three", "four"])
        expect(seqsOn(bob, topic)).toEqual([4])

        const left = yield* leave(channel)
        expect(left.status).toBe("ok")
        yield* restPost(token, id, "five")
        yield* until(() => seqsOn(bob, topic).includes(5), "bob hears five")
        // Alice no longer follows: nothing more arrives for her join.
        expect(seqsOn(alice, topic)).toEqual([1, 2, 3, 4])

        // Reconnect with the last watermark she got: only what she missed, once.
        const last = eventsOf(alice, topic, "activitySet").at(-1).watermark
        const again2 = yield* phoenixSocket("/socket/chat", { token, watermark: last, conversation_id: id })
        expect((yield* join(again2.socket.channel(topic, {}))).status).toBe("ok")
        yield* until(() => eventsOf(again2, topic, "activitySet").length >= 1, "the replay after reconnect")
        yield* restPost(token, id, "six")
        yield* until(() => seqsOn(again2, topic).includes(6), "six after reconnect")
        expect(seqsOn(again2, topic)).toEqual([5, 6])
      }).pipe(Effect.scoped))

    it.effect("a replay above 100 activities: at most 100 with has_more, then the rest as live sets, in order, none twice", () =>
      Effect.gen(function*() {
        const { id, token } = yield* conversation()
        yield* Effect.forEach(Array.from({ length: 130 }, (_, i) => i), (i) => restPost(token, id, `m${i + 1}`), { concurrency: 1 })
        const client = yield* phoenixSocket("/socket/chat", { token })
        const topic = topicOf(id)
        expect((yield* join(client.socket.channel(topic, { watermark: 10 }))).status).toBe("ok")
        yield* until(() => seqsOn(client, topic).length === 120, "the 120 activities above 10")
        const sets = eventsOf(client, topic, "activitySet")
        expect(sets[0].activities.length).toBe(100)
        expect(sets[0].has_more).toBe(true)
        expect(sets[0].watermark).toBe(encodeWatermark(110))
        expect(seqsOn(client, topic)).toEqual(Array.from({ length: 120 }, (_, i) => i + 11))
      }).pipe(Effect.scoped))

    it.effect("sync answers the activity set from a watermark; read stores the position and tells the others; typing reaches the others", () =>
      Effect.gen(function*() {
        const { channel: { secret }, id, token } = yield* conversation()
        yield* restPost(token, id, "one")
        yield* restPost(token, id, "two")
        const topic = topicOf(id)
        const alice = yield* phoenixSocket("/socket/chat", { token })
        const aliceChannel = alice.socket.channel(topic, {})
        expect((yield* join(aliceChannel)).status).toBe("ok")
        const synced = yield* push(aliceChannel, "sync", { watermark: encodeWatermark(1) })
        expect(synced).toMatchObject({ status: "ok", response: { watermark: encodeWatermark(2), has_more: false } })
        expect(synced.response.activities.map((a: any) => a.seq)).toEqual([2])

        // Bob: an agent of the channel, another user.
        const bob = yield* phoenixSocket("/socket/chat", { token: yield* generateToken(secret, { scope: "channel", user: { id: "bob" } }) })
        const bobChannel = bob.socket.channel(topic, {})
        expect((yield* join(bobChannel)).status).toBe("ok")
        yield* until(() => eventsOf(bob, topic, "activitySet").length === 1, "bob's replay")
        yield* until(() => eventsOf(alice, topic, "presence").some((p) => p.viewers.length === 2), "alice sees bob arrive")
        expect(eventsOf(alice, topic, "presence").at(-1)).toEqual({ viewers: ["alice", "bob"] })

        expect(yield* push(aliceChannel, "read", { watermark: 2 })).toEqual({ status: "ok", response: {} })
        yield* until(() => eventsOf(bob, topic, "deliveryStatus").length === 1, "bob hears the read")
        expect(eventsOf(bob, topic, "deliveryStatus")).toEqual([{ userId: "alice", status: "read", seq: 2 }])
        const stored = yield* query<{ seq: string }>("SELECT seq FROM read_positions WHERE conversation_id = $1 AND user_id = 'alice'", [id])
        expect(Number(stored[0]!.seq)).toBe(2)

        expect(yield* push(aliceChannel, "typing", {})).toEqual({ status: "ok", response: {} })
        yield* until(() => eventsOf(bob, topic, "typing").length >= 1, "bob hears typing")
        expect(eventsOf(bob, topic, "typing")[0]).toEqual({ userId: "alice" })
        // Her own typing and read are not echoed to her.
        expect(eventsOf(alice, topic, "typing")).toEqual([])
        expect(eventsOf(alice, topic, "deliveryStatus")).toEqual([])
      }).pipe(Effect.scoped))

    it.effect("the in-band auth extension: a fresh token of the same subject is taken, another one refused", () =>
      Effect.gen(function*() {
        const { id, token } = yield* conversation()
        const other = yield* conversation()
        const client = yield* phoenixSocket("/socket/chat", { token })
        const channel = client.socket.channel(topicOf(id), {})
        expect((yield* join(channel)).status).toBe("ok")
        const refreshed = yield* chat("POST", "/tokens/refresh", { bearer: token })
        expect(refreshed.status).toBe(200)
        expect(yield* push(channel, "auth", { token: refreshed.body.token })).toEqual({ status: "ok", response: {} })
        expect(yield* push(channel, "auth", { token: other.token })).toEqual({ status: "error", response: { reason: "forbidden" } })
        expect(yield* push(channel, "auth", { token: "garbage" })).toEqual({ status: "error", response: { reason: "unauthorized" } })
        expect(yield* push(channel, "auth", {})).toEqual({ status: "error", response: { reason: "bad_request" } })
      }).pipe(Effect.scoped))
  })

  describe("token kinds and refusals", () => {
    it.effect("every join refusal: unscoped, bound to another, missing read, other channel, other tenant, unknown, malformed, unknown topic", () =>
      Effect.gen(function*() {
        const { channel, id, tenant, token } = yield* conversation()
        const otherChannel = yield* insertChannel(tenant.id)
        const otherChannelConversation = yield* insertConversation(tenant.id, otherChannel.id)
        const otherTenant = yield* createTenant()
        const otherTenantChannel = yield* insertChannel(otherTenant.id)
        const otherTenantConversation = yield* insertConversation(otherTenant.id, otherTenantChannel.id)
        const unscoped = yield* generateToken(channel.secret, { user: { id: "u" } })
        const scoped = yield* generateToken(channel.secret, { scope: "channel" })
        const writeOnly = yield* generateToken(channel.secret, { scope: "channel", permissions: ["write"] })

        const joinAs = (bearer: string, topic: string, payload: object = {}) =>
          Effect.flatMap(phoenixSocket("/socket/chat", { token: bearer }), (client) => join(client.socket.channel(topic, payload)))

        expect(yield* joinAs(unscoped, topicOf(id))).toEqual({ status: "error", response: { reason: "forbidden" } })
        expect(yield* joinAs(token, topicOf(otherChannelConversation))).toEqual({ status: "error", response: { reason: "forbidden" } })
        expect(yield* joinAs(writeOnly, topicOf(id))).toEqual({ status: "error", response: { reason: "insufficient_permission", required: ["read"] } })
        expect(yield* joinAs(scoped, topicOf(otherChannelConversation))).toEqual({ status: "error", response: { reason: "not_found" } })
        expect(yield* joinAs(scoped, topicOf(otherTenantConversation))).toEqual({ status: "error", response: { reason: "not_found" } })
        expect(yield* joinAs(scoped, topicOf(crypto.randomUUID()))).toEqual({ status: "error", response: { reason: "not_found" } })
        expect(yield* joinAs(scoped, "chat:conversation:not-a-uuid")).toEqual({ status: "error", response: { reason: "not_found" } })
        expect(yield* joinAs(scoped, "chat:elsewhere:1")).toEqual({ status: "error", response: { reason: "unmatched_topic" } })
        // The channel-scoped token reaches its channel's conversations.
        expect(yield* joinAs(scoped, topicOf(id))).toEqual({ status: "ok", response: {} })
      }).pipe(Effect.scoped))

    it.effect("the channel topic: a channel-scoped token of a websocket channel only", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant()
        const socketChannel = yield* insertChannel(tenant.id, { type: "websocket" })
        const webhookChannel = yield* insertChannel(tenant.id)
        const scoped = yield* generateToken(socketChannel.secret, { scope: "channel" })
        const scopedWebhook = yield* generateToken(webhookChannel.secret, { scope: "channel" })
        const unscoped = yield* generateToken(socketChannel.secret)
        const joinAs = (bearer: string, topic: string) =>
          Effect.flatMap(phoenixSocket("/socket/chat", { token: bearer }), (client) => join(client.socket.channel(topic, {})))
        expect(yield* joinAs(scoped, `chat:channel:${socketChannel.id}`)).toEqual({ status: "ok", response: {} })
        expect(yield* joinAs(scoped, `chat:channel:${webhookChannel.id}`)).toEqual({ status: "error", response: { reason: "forbidden" } })
        expect(yield* joinAs(unscoped, `chat:channel:${socketChannel.id}`)).toEqual({ status: "error", response: { reason: "forbidden" } })
        expect(yield* joinAs(scopedWebhook, `chat:channel:${webhookChannel.id}`)).toEqual({
          status: "error",
          response: { reason: "unsupported_channel_type" }
        })
      }).pipe(Effect.scoped))

    it.effect("push refusals: missing write and typing, invalid clientId and activity, closed conversation, unknown event, unmatched topic", () =>
      Effect.gen(function*() {
        const { channel, id, token } = yield* conversation()
        const readOnly = yield* generateToken(channel.secret, { scope: "channel", permissions: ["read"] })
        const topic = topicOf(id)
        const reader = yield* phoenixSocket("/socket/chat", { token: readOnly })
        const readerChannel = reader.socket.channel(topic, {})
        expect((yield* join(readerChannel)).status).toBe("ok")
        expect(yield* push(readerChannel, "postActivity", { text: "x" })).toEqual({
          status: "error",
          response: { reason: "insufficient_permission", required: ["write"] }
        })
        expect(yield* push(readerChannel, "typing", {})).toEqual({ status: "error", response: { reason: "insufficient_permission", required: ["typing"] } })

        const writer = yield* phoenixSocket("/socket/chat", { token })
        const writerChannel = writer.socket.channel(topic, {})
        expect((yield* join(writerChannel)).status).toBe("ok")
        for (const clientId of ["", "x".repeat(129), "bad id", "ü", 5]) {
          expect(yield* push(writerChannel, "postActivity", { text: "x", clientId })).toEqual({
            status: "error",
            response: { reason: "invalid_activity", errors: { clientId: [expect.any(String)] } }
          })
        }
        const invalid = yield* push(writerChannel, "postActivity", { type: "nonsense", text: 5 })
        expect(invalid.status).toBe("error")
        expect(invalid.response.reason).toBe("invalid_activity")
        expect(Object.keys(invalid.response.errors).length).toBeGreaterThan(0)
        expect(yield* push(writerChannel, "nonsense", {})).toEqual({ status: "error", response: { reason: "unknown_event" } })

        expect((yield* chat("POST", `/conversations/${id}/close`, { bearer: token })).status).toBe(200)
        expect(yield* push(writerChannel, "postActivity", { text: "late" })).toEqual({ status: "error", response: { reason: "conversation_closed" } })
      }).pipe(Effect.scoped))
  })

  describe("per-socket limits", () => {
    it.effect("a frame over 128 KiB is answered payload_too_large and the socket stays; over 1 MiB closes 1009", () =>
      Effect.gen(function*() {
        const { id, token } = yield* conversation()
        const client = yield* rawSocket("/socket/chat/websocket", { token, vsn: "2.0.0" })
        client.send(JSON.stringify(["1", "1", topicOf(id), "phx_join", {}]))
        expect((yield* replyTo(client, "1")).status).toBe("ok")
        client.send(JSON.stringify(["1", "2", topicOf(id), "postActivity", { text: "x".repeat(130 * 1024) }]))
        yield* until(() => client.messages.some((m) => m[2] === "phoenix" && m[3] === "error"), "the payload_too_large error")
        expect(client.messages.find((m) => m[2] === "phoenix" && m[3] === "error")).toEqual([null, null, "phoenix", "error", { reason: "payload_too_large" }])
        client.send(JSON.stringify([null, "3", "phoenix", "heartbeat", {}]))
        expect(yield* replyTo(client, "3")).toEqual({ status: "ok", response: {} })
        client.send("x".repeat(1024 * 1024 + 10))
        expect((yield* Effect.promise(() => client.closed)).code).toBe(1009)
      }).pipe(Effect.scoped))

    it.effect("21 frames within a second: one rate_limited error with retry_after_ms, the socket stays open", () =>
      Effect.gen(function*() {
        const { token } = yield* conversation()
        const client = yield* rawSocket("/socket/chat/websocket", { token })
        for (let i = 1; i <= 25; i++) client.send(JSON.stringify([null, String(i), "phoenix", "heartbeat", {}]))
        yield* until(() => client.messages.some((m) => m[3] === "error"), "the rate_limited error")
        const errors = client.messages.filter((m) => m[2] === "phoenix" && m[3] === "error")
        expect(errors).toEqual([[null, null, "phoenix", "error", { reason: "rate_limited", retry_after_ms: expect.any(Number) }]])
        expect(client.messages.filter((m) => m[3] === "phx_reply").length).toBe(20)
        yield* Effect.sleep("1100 millis")
        client.send(JSON.stringify([null, "99", "phoenix", "heartbeat", {}]))
        expect(yield* replyTo(client, "99")).toEqual({ status: "ok", response: {} })
      }).pipe(Effect.scoped))

    it.effect("51 joins: the 51st is too_many_joins; rejoining a joined topic is still allowed (the old join is closed)", () =>
      Effect.gen(function*() {
        const { tenant, channel } = yield* tenantWithChannel
        const scoped = yield* generateToken(channel.secret, { scope: "channel" })
        const ids = yield* Effect.forEach(Array.from({ length: 51 }), () => insertConversation(tenant.id, channel.id))
        const client = yield* rawSocket("/socket/chat/websocket", { token: scoped })
        for (let i = 0; i < 51; i++) {
          // Joins count against 20 frames a second.
          if (i > 0 && i % 15 === 0) yield* Effect.sleep("1100 millis")
          client.send(JSON.stringify([`j${i}`, `j${i}`, topicOf(ids[i]!), "phx_join", {}]))
          const answer = yield* replyTo(client, `j${i}`)
          expect(answer.status, `join ${i}`).toBe(i < 50 ? "ok" : "error")
          if (i === 50) expect(answer.response).toEqual({ reason: "too_many_joins" })
        }
        client.send(JSON.stringify(["again", "again", topicOf(ids[0]!), "phx_join", {}]))
        expect((yield* replyTo(client, "again")).status).toBe("ok")
        expect(client.messages).toContainEqual(["j0", null, topicOf(ids[0]!), "phx_close", {}])
      }).pipe(Effect.scoped))

    it.effect("a client that stops reading is closed 4503 slow_consumer once 1000 frames wait unflushed", () =>
      Effect.gen(function*() {
        const { id, token } = yield* conversation()
        const big = "x".repeat(60_000)
        yield* Effect.forEach(Array.from({ length: 100 }), () => restPost(token, id, big), { concurrency: 10, discard: true })
        const client = yield* rawSocket("/socket/chat/websocket", { token })
        client.send(JSON.stringify(["j", "j", topicOf(id), "phx_join", { watermark: 100 }]))
        expect((yield* replyTo(client, "j")).status).toBe("ok")
        const tcp = (client.ws as any)._socket as TcpSocket
        tcp.pause()
        // Four sync answers of ~6 MB each fill the kernel's buffers, so later frames wait in the node.
        for (let i = 0; i < 4; i++) client.send(JSON.stringify(["j", `s${i}`, topicOf(id), "sync", { watermark: 0 }]))
        yield* Effect.forEach(Array.from({ length: 1100 }, (_, i) => i), (i) => restPost(token, id, `small ${i}`), { concurrency: 20, discard: true })
        tcp.resume()
        const closed = yield* Effect.promise(() => client.closed)
        expect(closed.code).toBe(4503)
        expect(JSON.parse(closed.reason)).toEqual({ reason: "slow_consumer", retryAfterMs: expect.any(Number) })
        // What did arrive came in order, without a gap.
        const seqs = client.messages.filter((m) => m[3] === "activitySet").flatMap((m) => m[4].activities.map((a: any) => a.seq))
        expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => i + 101))
      }).pipe(Effect.scoped), { timeout: 120_000 })
  })

  describe("bad input", () => {
    it.effect("generated garbage, wrong arrays, unknown events and topics, foreign conversations: the documented reply, and no other conversation's frame", () =>
      Effect.gen(function*() {
        const mine = yield* conversation()
        const other = yield* conversation()
        const sameChannelOther = yield* Effect.flatMap(chat("POST", "/conversations", { bearer: mine.parent }), (reply) => Effect.succeed(reply.body.conversationId as string))
        const readOnly = yield* generateToken(mine.channel.secret, { scope: "channel", permissions: ["read"] })
        const noRead = yield* generateToken(mine.channel.secret, { scope: "channel", permissions: ["write", "typing"] })
        // Activity keeps flowing in the other conversations all along.
        const noise = Effect.forever(Effect.zipRight(
          Effect.all([restPost(other.token, other.id, "secret-other"), restPost(mine.parent, sameChannelOther, "secret-sibling")]).pipe(
            Effect.catchAllDefect(() => Effect.void)
          ),
          Effect.sleep("50 millis")
        ))
        yield* Effect.forkScoped(noise)

        const mineTopic = topicOf(mine.id)
        type Case = { frame: string | Buffer; token: string; expect: any; ref?: string; join?: boolean }
        const reply = (status: string, response: object) => ({ status, response })
        const socketError = (reason: string) => [null, null, "phoenix", "error", { reason }]
        const cases: Array<Case> = [
          { frame: "garbage", token: mine.token, expect: socketError("invalid_json") },
          { frame: "{\"topic\": 1}", token: mine.token, expect: socketError("not_a_message") },
          { frame: "[1,2,3]", token: mine.token, expect: socketError("not_a_message") },
          { frame: Buffer.from([1, 2, 3]), token: mine.token, expect: socketError("binary_not_supported") },
          { frame: JSON.stringify([null, "r", 5, "x", {}]), token: mine.token, expect: socketError("invalid_topic") },
          { frame: JSON.stringify([null, "r", "t", 5, {}]), ref: "r", token: mine.token, expect: reply("error", { reason: "invalid_event" }) },
          { frame: JSON.stringify([null, "r", "t", "e", []]), ref: "r", token: mine.token, expect: reply("error", { reason: "invalid_payload" }) },
          { frame: JSON.stringify([null, "r", "phoenix", "nope", {}]), ref: "r", token: mine.token, expect: reply("error", { reason: "unknown_event" }) },
          { frame: JSON.stringify([null, "r", "nowhere", "phx_join", {}]), ref: "r", token: mine.token, expect: reply("error", { reason: "unmatched_topic" }) },
          { frame: JSON.stringify([null, "r", mineTopic, "postActivity", { text: "not joined" }]), ref: "r", token: mine.token, expect: reply("error", { reason: "unmatched_topic" }) },
          { frame: JSON.stringify([null, "r", mineTopic, "phx_leave", {}]), ref: "r", token: mine.token, expect: reply("error", { reason: "unmatched_topic" }) },
          { frame: JSON.stringify(["r", "r", topicOf(other.id), "phx_join", {}]), ref: "r", token: mine.token, expect: reply("error", { reason: "forbidden" }) },
          { frame: JSON.stringify(["r", "r", topicOf(sameChannelOther), "phx_join", {}]), ref: "r", token: mine.token, expect: reply("error", { reason: "forbidden" }) },
          { frame: JSON.stringify(["r", "r", topicOf(other.id), "phx_join", {}]), ref: "r", token: readOnly, expect: reply("error", { reason: "not_found" }) },
          { frame: JSON.stringify(["r", "r", mineTopic, "phx_join", {}]), ref: "r", token: noRead, expect: reply("error", { reason: "insufficient_permission", required: ["read"] }) },
          { frame: JSON.stringify(["r", "r", mineTopic, "phx_join", { watermark: { bad: true } }]), ref: "r", token: mine.token, expect: reply("ok", {}) },
          { frame: JSON.stringify(["r", "r", mineTopic, "postActivity", { text: "x" }]), ref: "r", join: true, token: readOnly, expect: reply("error", { reason: "insufficient_permission", required: ["write"] }) },
          { frame: JSON.stringify(["r", "r", mineTopic, "typing", {}]), ref: "r", join: true, token: readOnly, expect: reply("error", { reason: "insufficient_permission", required: ["typing"] }) },
          { frame: JSON.stringify(["r", "r", mineTopic, "read", { watermark: "garbage" }]), ref: "r", join: true, token: mine.token, expect: reply("error", { reason: "invalid_watermark" }) },
          { frame: JSON.stringify(["r", "r", mineTopic, "whatever", {}]), ref: "r", join: true, token: mine.token, expect: reply("error", { reason: "unknown_event" }) },
          { frame: JSON.stringify(["r", "r", mineTopic, "postActivity", { attachments: "no" }]), ref: "r", join: true, token: mine.token, expect: expect.objectContaining({ status: "error", response: expect.objectContaining({ reason: "invalid_activity" }) }) }
        ]
        // Random arrays of the right length with wrong element types.
        const pick = <A>(values: ReadonlyArray<A>) => values[Math.floor(Math.random() * values.length)]!
        for (let i = 0; i < 20; i++) {
          const frame = [pick([null, 1, {}, "x"]), pick([null, 2, [], "y"]), pick([null, 3, "", mineTopic]), pick([null, 4, "phx_join", "heartbeat"]), pick([null, 5, "p", []])]
          cases.push({ frame: JSON.stringify(frame), token: mine.token, expect: "anything-but-crash" })
        }

        const clients: Array<RawClient> = []
        for (const [index, testCase] of cases.entries()) {
          const client = yield* rawSocket("/socket/chat/websocket", { token: testCase.token })
          clients.push(client)
          if (testCase.join === true) {
            client.send(JSON.stringify(["r", "j", mineTopic, "phx_join", {}]))
            expect((yield* replyTo(client, "j")).status, `case ${index}: join`).toBe("ok")
          }
          client.send(testCase.frame)
          if (testCase.expect === "anything-but-crash") {
            client.send(JSON.stringify([null, "alive", "phoenix", "heartbeat", {}]))
            expect((yield* replyTo(client, "alive")).status, `case ${index}: still alive`).toBe("ok")
          } else if (testCase.ref !== undefined) {
            expect(yield* replyTo(client, testCase.ref), `case ${index}: ${String(testCase.frame)}`).toEqual(testCase.expect)
          } else {
            yield* until(() => client.messages.some((m) => m[2] === "phoenix" && m[3] === "error"), `case ${index}: an error`)
            expect(client.messages.find((m) => m[2] === "phoenix" && m[3] === "error"), `case ${index}`).toEqual(testCase.expect)
          }
        }
        yield* Effect.sleep("500 millis")
        for (const client of clients) {
          for (const message of client.messages) {
            const text = JSON.stringify(message)
            expect(text).not.toContain("secret-other")
            expect(text).not.toContain("secret-sibling")
            // Only the refusal itself names a foreign topic; no event ever comes from one.
            if (message[3] !== "phx_reply") expect(["phoenix", mineTopic]).toContain(message[2])
            else if (message[4]?.status === "ok") expect(["phoenix", mineTopic]).toContain(message[2])
          }
          expect(client.ws.readyState).toBe(1)
        }
      }).pipe(Effect.scoped), { timeout: 120_000 })
  })

  describe("endings", () => {
    it.effect("revocation closes the token's socket 4401 and leaves another token's socket open", () =>
      Effect.gen(function*() {
        const { channel, id, token } = yield* conversation()
        const agent = yield* generateToken(channel.secret, { scope: "channel", user: { id: "agent" } })
        const revoked = yield* phoenixSocket("/socket/chat", { token })
        const kept = yield* phoenixSocket("/socket/chat", { token: agent })
        expect((yield* join(revoked.socket.channel(topicOf(id), {}))).status).toBe("ok")
        const keptChannel = kept.socket.channel(topicOf(id), {})
        expect((yield* join(keptChannel)).status).toBe("ok")
        expect((yield* chat("POST", "/tokens/revoke", { bearer: token })).status).toBe(200)
        yield* until(() => revoked.closes.length > 0, "the revoked socket closes")
        expect(revoked.closes[0]!.code).toBe(4401)
        expect(kept.closes).toEqual([])
        expect((yield* push(keptChannel, "postActivity", { text: "still here" })).status).toBe("ok")
      }).pipe(Effect.scoped))
  })
})

layer(TestNodeLive({ ...ENV, DRAIN_BATCH_INTERVAL_MS: "0" }), { excludeTestServices: true })("Phoenix binding, drain", (it) => {
  it.effect("a drain closes a joined socket 1012 with retryAfterMs and a never-joined one 1001; new upgrades get 503", () =>
    Effect.gen(function*() {
      const { id, token } = yield* conversation()
      const joined = yield* phoenixSocket("/socket/chat", { token })
      const idle = yield* phoenixSocket("/socket/chat", { token })
      expect((yield* join(joined.socket.channel(topicOf(id), {}))).status).toBe("ok")
      yield* until(() => idle.socket.isConnected(), "the idle socket connects")
      const lifecycle = yield* Lifecycle
      const live = yield* LiveConnections
      yield* lifecycle.startDrain
      yield* live.drain
      yield* until(() => joined.closes.length > 0 && idle.closes.length > 0, "both close")
      expect(joined.closes[0]!.code).toBe(1012)
      expect(JSON.parse(joined.closes[0]!.reason)).toEqual({ reason: "unavailable", retryAfterMs: expect.any(Number) })
      expect(idle.closes[0]!.code).toBe(1001)
      const refused = yield* upgradeAnswer("/socket/chat/websocket", { token })
      expect(refused).toMatchObject({ status: 503, body: { error: { code: "unavailable" } } })
    }).pipe(Effect.scoped))
})

layer(TestNodeLive({ ...ENV, RATE_LIMITS: JSON.stringify({ activity_create: { limit: 2, scale_ms: 3_600_000 } }) }), { excludeTestServices: true })(
  "Phoenix binding, rate limited posts",
  (it) => {
    it.effect("postActivity over the activity_create bucket is rate_limited with retry_after_ms; a repeated clientId still gets its activity", () =>
      Effect.gen(function*() {
        const { id, token } = yield* conversation()
        const client = yield* phoenixSocket("/socket/chat", { token })
        const channel = client.socket.channel(topicOf(id), {})
        expect((yield* join(channel)).status).toBe("ok")
        const first = yield* push(channel, "postActivity", { text: "1", clientId: "k1" })
        expect((yield* push(channel, "postActivity", { text: "2", clientId: "k2" })).status).toBe("ok")
        const limited = yield* push(channel, "postActivity", { text: "3", clientId: "k3" })
        expect(limited).toEqual({ status: "error", response: { reason: "rate_limited", retry_after_ms: expect.any(Number) } })
        expect(yield* push(channel, "postActivity", { text: "1", clientId: "k1" })).toEqual(first)
      }).pipe(Effect.scoped))
  }
)

/** A node whose database connections pass a proxy the test can cut or freeze. */
class Proxy extends Context.Tag("test/PhoenixProxy")<Proxy, TcpProxy>() {}
const NodeBehindProxy = Layer.unwrapScoped(Effect.gen(function*() {
  const db = yield* TestDatabase
  const url = new URL(db.url!)
  const proxy = yield* tcpProxy({ host: url.hostname, port: Number(url.port || 5432) })
  url.host = `127.0.0.1:${proxy.port}`
  return Layer.merge(TestNodeLive({ ...ENV, DATABASE_URL: url.toString() }), Layer.succeed(Proxy, proxy))
})).pipe(Layer.provide(TestDatabaseLive))

layer(NodeBehindProxy, { excludeTestServices: true })("Phoenix binding, database unavailable", (it) => {
  it.effect("a join while the database is down is refused unavailable with retry_after_ms; the socket stays and joins once it is back", () =>
    Effect.gen(function*() {
      const proxy = yield* Proxy
      const { id, token } = yield* conversation()
      const client = yield* rawSocket("/socket/chat/websocket", { token })
      client.send(JSON.stringify([null, "h", "phoenix", "heartbeat", {}]))
      expect((yield* replyTo(client, "h")).status).toBe("ok")
      proxy.refuse()
      client.send(JSON.stringify(["1", "1", topicOf(id), "phx_join", {}]))
      expect(yield* replyTo(client, "1")).toEqual({ status: "error", response: { reason: "unavailable", retry_after_ms: expect.any(Number) } })
      proxy.restore()
      let answer = { status: "error" }
      for (let i = 2; answer.status !== "ok" && i < 40; i++) {
        yield* Effect.sleep("500 millis")
        client.send(JSON.stringify([String(i), String(i), topicOf(id), "phx_join", {}]))
        answer = yield* replyTo(client, String(i))
      }
      expect(answer.status).toBe("ok")
    }).pipe(Effect.scoped), { timeout: 60_000 })

  it.effect("the live feed failing while joined: event error replay_unavailable with the watermark, the socket stays joined and resumes", () =>
    Effect.gen(function*() {
      const proxy = yield* Proxy
      const { id, token } = yield* conversation()
      yield* restPost(token, id, "one")
      const client = yield* rawSocket("/socket/chat/websocket", { token })
      // The hub's first read of the conversation's head loses its answer: the feed fails after the join.
      proxy.loseAnswerTo("SELECT id, head_seq FROM conversations")
      client.send(JSON.stringify(["j", "j", topicOf(id), "phx_join", {}]))
      expect((yield* replyTo(client, "j")).status).toBe("ok")
      yield* until(() => client.messages.some((m) => m[3] === "error"), "the replay_unavailable event")
      expect(client.messages.find((m) => m[3] === "error")).toEqual([
        "j",
        null,
        topicOf(id),
        "error",
        { code: "replay_unavailable", watermark: encodeWatermark(1), retry_after_ms: expect.any(Number) }
      ])
      yield* restPost(token, id, "two")
      const sets = () => client.messages.filter((m) => m[3] === "activitySet").flatMap((m) => m[4].activities.map((a: any) => a.seq))
      yield* until(() => sets().includes(2), "the feed resumed")
      expect(sets()).toEqual([1, 2])
      expect(client.ws.readyState).toBe(1)
    }).pipe(Effect.scoped), { timeout: 60_000 })

  it.effect("33 sends left unanswered (the database frozen): the 33rd is refused too_many_in_flight", () =>
    Effect.gen(function*() {
      const proxy = yield* Proxy
      const { id, token } = yield* conversation()
      const client = yield* rawSocket("/socket/chat/websocket", { token })
      client.send(JSON.stringify(["j", "j", topicOf(id), "phx_join", {}]))
      expect((yield* replyTo(client, "j")).status).toBe("ok")
      proxy.freeze()
      yield* Effect.addFinalizer(() => Effect.sync(() => proxy.restore()))
      for (let i = 1; i <= 33; i++) {
        if (i % 15 === 0) yield* Effect.sleep("1100 millis")
        client.send(JSON.stringify(["j", `p${i}`, topicOf(id), "postActivity", { text: `m${i}`, clientId: `c${i}` }]))
      }
      expect(yield* replyTo(client, "p33")).toEqual({ status: "error", response: { reason: "too_many_in_flight" } })
      // The 32 before it are still unanswered.
      expect(client.messages.filter((m) => m[3] === "phx_reply" && m[1] !== "j")).toHaveLength(1)
      // Left without an answer, a send is answered unavailable: re-sent with its clientId, it is not stored twice.
      yield* until(() => client.messages.some((m) => m[1] === "p1"), "the first send's answer", 40_000)
      expect(client.messages.find((m) => m[1] === "p1")![4]).toEqual({
        status: "error",
        response: { reason: "unavailable", retry_after_ms: expect.any(Number) }
      })
      proxy.restore()
    }).pipe(Effect.scoped), { timeout: 60_000 })
})
