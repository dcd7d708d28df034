import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { createConnection } from "node:net"
import { pack } from "msgpackr"
import Pg from "pg"
import { chat, generateToken, tenantWithChannel } from "./support/ClientApi.js"
import { eventually } from "./support/Eventually.js"
import { insertChannel, insertConversation } from "./support/Fixtures.js"
import {
  closeOf,
  connect,
  hello,
  metricValue,
  type NativeClient,
  refused,
  socketUrl,
  tryConnect
} from "./support/NativeClient.js"
import { query, TestDatabase, TestDatabaseLive } from "./support/TestDatabase.js"
import { spawnNode } from "./support/NodeProcess.js"
import { ADMIN_TOKEN, createTenant, request, TestNode, TestNodeLive } from "./support/TestNode.js"

const SIGNING_KEY = "native-socket-test-key-0123456789abcdef"
const BASE_ENV = {
  TOKEN_SIGNING_KEY: SIGNING_KEY,
  TRUSTED_PROXIES: "127.0.0.1/32",
  RATE_LIMITS: JSON.stringify({ activity_create: { limit: 10000, scale_ms: 1000 } })
}

/** Holds `table` locked (reads wait too) in a transaction of its own until the scope closes. */
const holdTableLocked = (table: string) =>
  Effect.flatMap(TestDatabase, ({ url }) => {
    const holder = new Pg.Client({ connectionString: url! })
    return Effect.acquireRelease(
      Effect.promise(async () => {
        await holder.connect()
        await holder.query("BEGIN")
        await holder.query(`LOCK TABLE ${table} IN ACCESS EXCLUSIVE MODE`)
      }),
      () => Effect.promise(() => holder.query("ROLLBACK").then(() => holder.end()))
    )
  })

const baseUrl = Effect.map(TestNode, (node) => node.baseUrl)

/** A new conversation through the client API: its id, the bound token, and the unscoped token that made it. */
const startConversation = (secret: string, tokenBody: unknown = { user: { id: "alice" } }) =>
  Effect.gen(function*() {
    const parent = yield* generateToken(secret, tokenBody)
    const reply = yield* chat("POST", "/conversations", { bearer: parent })
    if (reply.status !== 201) throw new Error(`create failed: ${reply.status} ${JSON.stringify(reply.body)}`)
    return { parent, id: reply.body.conversationId as string, token: reply.body.token as string }
  })

const postText = (token: string, id: string, text: string) =>
  Effect.map(chat("POST", `/conversations/${id}/activities`, { bearer: token, body: { text } }), (reply) => {
    if (reply.status !== 200) throw new Error(`post failed: ${reply.status} ${JSON.stringify(reply.body)}`)
    return reply.body.id as string
  })

/** A socket of `token` that said hello: the client and its welcome. */
const joined = (token: string, options: { readonly protocols?: ReadonlyArray<string>; readonly query?: Record<string, string>; readonly watermark?: unknown } = {}) =>
  Effect.gen(function*() {
    const client = yield* connect(yield* baseUrl, { token, ...options.query }, options.protocols)
    const welcome = yield* hello(client, options.watermark)
    expect(welcome.type).toBe("welcome")
    return { client, welcome }
  })

/** Sends `frame` and returns the first answer that matches. */
const ask = (client: NativeClient, frame: unknown, matches: (f: any) => boolean) =>
  Effect.suspend(() => {
    const from = client.frames.length
    client.send(frame)
    return client.next(matches, { from })
  })

/** The activity frame of `seq` (an ack carries a seq too). */
const activityAt = (seq: number) => (f: any) => f.seq === seq && f.type !== "ack"
const isError = (code: string) => (f: any) => f.type === "error" && f.code === code
const sendFrame = (clientId: string, activity: Record<string, unknown>) => ({ type: "send", clientId, activity })
const answerTo = (clientId: string) => (f: any) => (f.type === "ack" || f.type === "error") && f.clientId === clientId

layer(TestNodeLive(BASE_ENV), { excludeTestServices: true })("native socket", (it) => {
  describe("upgrade", () => {
    it.scoped("a plain GET is 426 upgrade_required", () =>
      Effect.gen(function*() {
        const reply = yield* request("GET", "/socket/chat/v1")
        expect(reply.status).toBe(426)
        expect(reply.body.error.code).toBe("upgrade_required")
      }))

    it.scoped("an unsupported subprotocol is 400 unsupported_protocol listing the supported ones", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { token } = yield* startConversation(channel.secret)
        const answer = yield* refused(yield* baseUrl, { token }, ["chat.v2", "mqtt"])
        expect(answer.status).toBe(400)
        expect(answer.body.error).toMatchObject({
          code: "unsupported_protocol",
          details: { supported: ["chat.v1", "chat.v1+json", "chat.v1+msgpack"] }
        })
      }))

    it.scoped("a bad or missing token is 401", () =>
      Effect.gen(function*() {
        const url = yield* baseUrl
        const bad = yield* refused(url, { token: "not-a-token" })
        expect(bad.status).toBe(401)
        expect(bad.body.error.code).toBe("unauthorized")
        const missing = yield* refused(url, {})
        expect(missing.status).toBe(401)
      }))

    it.scoped("the token may come in the Authorization header instead of the query", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { token } = yield* startConversation(channel.secret)
        const url = yield* baseUrl
        const client = yield* Effect.acquireRelease(tryConnect(url, {}, ["chat.v1"], { authorization: `Bearer ${token}` }), (c) =>
          Effect.sync(() => "ws" in c && c.ws.terminate()))
        if (!("ws" in client)) throw new Error(`refused: ${JSON.stringify(client)}`)
        expect((yield* hello(client)).type).toBe("welcome")
        const wrong = yield* refused(url, { token }, ["chat.v1"], { authorization: "Bearer not-a-token" })
        expect(wrong.status).toBe(401)
      }))

    it.scoped("no subprotocol offered speaks JSON, as chat.v1; the client's first supported offer is taken", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { token } = yield* startConversation(channel.secret)
        const bare = yield* joined(token, { protocols: [] })
        expect(bare.client.protocol).toBe("")
        const offered = yield* connect(yield* baseUrl, { token }, ["mqtt", "chat.v1+msgpack", "chat.v1"])
        expect(offered.protocol).toBe("chat.v1+msgpack")
      }))
  })

  describe.each([["chat.v1+json"], ["chat.v1"], ["chat.v1+msgpack"]])("the exchange over %s", (protocol) => {
    it.scoped("hello, welcome, replay above the watermark, live frames, send and ack, idempotent re-send", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { id, token } = yield* startConversation(channel.secret)
        const first = yield* postText(token, id, "one")
        const second = yield* postText(token, id, "two")
        const { client, welcome } = yield* joined(token, { protocols: [protocol], watermark: 1 })
        expect(client.protocol).toBe(protocol)
        expect(welcome.data).toEqual({
          conversationId: id,
          headSeq: 2,
          heartbeatIntervalMs: 30000,
          limits: { maxInFlight: 32, maxFrameBytes: 131072 }
        })
        const replayed = yield* client.next((f) => f.seq === 2)
        expect(replayed).toMatchObject({ type: "text", id: second, from: "user", sender: { id: "alice", role: "user" }, data: { text: "two" } })
        expect(client.frames.some((f) => f.id === first)).toBe(false)

        const ack = yield* ask(client, sendFrame("c-1", { text: "three" }), answerTo("c-1"))
        expect(ack).toMatchObject({ type: "ack", clientId: "c-1", seq: 3 })
        const live = yield* client.next(activityAt(3))
        expect(live).toMatchObject({ type: "text", id: ack.id, data: { text: "three" } })

        const again = yield* ask(client, sendFrame("c-1", { text: "three" }), answerTo("c-1"))
        expect(again).toMatchObject({ type: "ack", clientId: "c-1", id: ack.id, seq: 3 })
        const stored = yield* query<{ n: number }>("SELECT count(*)::int AS n FROM activities WHERE conversation_id = $1", [id])
        expect(stored[0]!.n).toBe(3)

        const pong = yield* ask(client, { type: "ping" }, (f) => f.type === "pong")
        expect(pong.timestamp).toEqual(expect.any(Number))
      }))
  })

  it.scoped("a second listener gets the others' frames; typing and read go to the others only", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const { id, token } = yield* startConversation(channel.secret)
      const agent = yield* generateToken(channel.secret, { user: { id: "agent" }, scope: "channel" })
      const a = (yield* joined(token)).client
      const b = (yield* joined(agent, { query: { conversation_id: id }, protocols: ["chat.v1+msgpack"] })).client
      // Each identified listener counts as a viewer while it follows the conversation.
      yield* a.next((f) => f.type === "presence" && f.data.viewers.join() === "agent,alice")

      const ack = yield* ask(a, sendFrame("a-1", { text: "hello agent" }), answerTo("a-1"))
      const atB = yield* b.next(activityAt(ack.seq))
      expect(atB).toMatchObject({ from: "bot", sender: { id: "alice", role: "bot" }, data: { text: "hello agent" } })

      a.send({ type: "typing" })
      expect(yield* b.next((f) => f.type === "typing")).toMatchObject({ from: "bot", sender: { id: "alice" } })
      b.send({ type: "read", seq: ack.seq })
      expect(yield* a.next((f) => f.type === "deliveryStatus")).toMatchObject({ data: { userId: "agent", status: "read", seq: ack.seq } })
      const position = yield* query<{ seq: string }>("SELECT seq FROM read_positions WHERE conversation_id = $1 AND user_id = 'agent'", [id])
      expect(Number(position[0]!.seq)).toBe(ack.seq)
      // Each side's own signals do not come back: a round trip after them shows none arrived.
      yield* ask(a, { type: "ping" }, (f) => f.type === "pong")
      yield* ask(b, { type: "ping" }, (f) => f.type === "pong")
      expect(a.frames.some((f) => f.type === "typing")).toBe(false)
      expect(b.frames.some((f) => f.type === "deliveryStatus")).toBe(false)
    }))

  it.scoped("a typed message is a frame of its messageType; a send's activity fields reach the store", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const { id, token } = yield* startConversation(channel.secret)
      const { client } = yield* joined(token)
      const ack = yield* ask(
        client,
        sendFrame("typed", { type: "message", messageType: "buttons", payload: { buttons: [{ label: "ok" }] }, channelData: { k: 1 } }),
        answerTo("typed")
      )
      expect(ack.type).toBe("ack")
      const frame = yield* client.next(activityAt(ack.seq))
      expect(frame.type).toBe("buttons")
      const rows = yield* query<{ message_type: string; metadata: unknown; sender: string }>(
        "SELECT message_type, metadata, sender FROM activities WHERE conversation_id = $1",
        [id]
      )
      expect(rows[0]).toMatchObject({ message_type: "buttons", metadata: { k: 1 }, sender: "alice" })
    }))

  it.scoped("a token without user_id sends as `user`", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const { id, token } = yield* startConversation(channel.secret, {})
      const { client } = yield* joined(token)
      const ack = yield* ask(client, sendFrame("anon", { text: "hi" }), answerTo("anon"))
      expect(ack.type).toBe("ack")
      const rows = yield* query<{ sender: string }>("SELECT sender FROM activities WHERE conversation_id = $1", [id])
      expect(rows[0]!.sender).toBe("user")
    }))

  it.scoped("the legacy and opaque watermark forms are taken; one above the head is invalid_watermark, then live", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const { id, token } = yield* startConversation(channel.secret)
      const firstId = yield* postText(token, id, "one")
      yield* postText(token, id, "two")
      const opaque = Buffer.from("seq:1").toString("base64url")
      const byOpaque = (yield* joined(token, { watermark: opaque })).client
      yield* byOpaque.next((f) => f.seq === 2)
      expect(byOpaque.frames.some((f) => f.seq === 1)).toBe(false)
      const legacy = Buffer.from(firstId).toString("base64url")
      const byLegacy = (yield* joined(token, { watermark: legacy })).client
      yield* byLegacy.next((f) => f.seq === 2)
      expect(byLegacy.frames.some((f) => f.seq === 1)).toBe(false)
      const garbage = (yield* joined(token, { watermark: "%%%" })).client
      yield* garbage.next((f) => f.seq === 1)
      const above = (yield* joined(token, { watermark: 99 })).client
      expect(yield* above.next(isError("invalid_watermark"))).toMatchObject({ details: { watermark: 2 } })
      yield* postText(token, id, "three")
      yield* above.next((f) => f.seq === 3)
      expect(above.frames.some((f) => f.seq === 1 || f.seq === 2)).toBe(false)
    }))

  it.scoped("a replay longer than the outbound backlog waits for a client that lags, which gets it whole, in order", () =>
    Effect.gen(function*() {
      const { channel, tenant } = yield* tenantWithChannel
      const { id, token } = yield* startConversation(channel.secret)
      yield* query(
        `INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text)
         SELECT $1, s, gen_random_uuid(), $2, 'message', 'bot', 'replayed ' || s || repeat('x', 10000) FROM generate_series(1, 2500) s`,
        [id, tenant.id]
      )
      yield* query("UPDATE conversations SET head_seq = 2500 WHERE id = $1", [id])
      const client = yield* connect(yield* baseUrl, { token })
      const socket = (client.ws as unknown as { _socket: { pause: () => void; resume: () => void } })._socket
      // Not reading while the replay starts: what the node writes meanwhile stays unflushed.
      socket.pause()
      client.send({ type: "hello", watermark: 0 })
      yield* Effect.sleep("3 seconds")
      socket.resume()
      yield* client.next(activityAt(2500), { within: 60_000 })
      const seqs = client.frames.filter((f) => typeof f.seq === "number").map((f) => f.seq)
      expect(seqs).toEqual(Array.from({ length: 2500 }, (_, i) => i + 1))
      expect(client.ws.readyState).toBe(client.ws.OPEN)
    }), { timeout: 90_000 })

  it.scoped("in-band auth: a fresh token of the same subject is taken (authOk), another subject's is refused", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const { id, parent } = yield* startConversation(channel.secret)
      const { client } = yield* joined(parent, { query: { conversation_id: id } })
      const fresh = yield* generateToken(channel.secret, { user: { id: "alice" } })
      const ok = yield* ask(client, { type: "auth", token: fresh }, (f) => f.type === "authOk" || f.type === "error")
      expect(ok).toMatchObject({ type: "authOk", expiresAt: expect.any(Number) })
      const other = yield* generateToken(channel.secret, { user: { id: "mallory" } })
      expect(yield* ask(client, { type: "auth", token: other }, (f) => f.type === "error")).toMatchObject({ code: "forbidden" })
      expect(yield* ask(client, { type: "auth", token: "garbage" }, (f) => f.type === "error")).toMatchObject({ code: "unauthorized" })
      yield* ask(client, { type: "ping" }, (f) => f.type === "pong")
    }))

  describe("errors", () => {
    it.scoped("frames before hello: send, typing and read are bad_request; ping works; a second hello is bad_request", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { token } = yield* startConversation(channel.secret)
        const client = yield* connect(yield* baseUrl, { token })
        expect(yield* ask(client, sendFrame("early", { text: "x" }), answerTo("early"))).toMatchObject({ code: "bad_request" })
        expect(yield* ask(client, { type: "typing" }, (f) => f.type === "error")).toMatchObject({ code: "bad_request" })
        expect(yield* ask(client, { type: "read", seq: 1 }, (f) => f.type === "error")).toMatchObject({ code: "bad_request" })
        yield* ask(client, { type: "ping" }, (f) => f.type === "pong")
        expect((yield* hello(client)).type).toBe("welcome")
        expect(yield* ask(client, { type: "hello" }, (f) => f.type === "error")).toMatchObject({ code: "bad_request" })
      }))

    it.scoped("a send's invalid activity is invalid_message with details; a closed conversation is conversation_closed", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { id, token } = yield* startConversation(channel.secret)
        const { client } = yield* joined(token)
        const invalid = yield* ask(client, sendFrame("bad-type", { type: "deliveryReceipt", text: "x" }), answerTo("bad-type"))
        expect(invalid).toMatchObject({ type: "error", code: "invalid_message", clientId: "bad-type", details: { type: expect.any(Array) } })
        const notObject = yield* ask(client, { type: "send", clientId: "nobj", activity: [1] }, answerTo("nobj"))
        expect(notObject).toMatchObject({ code: "invalid_message", details: { activity: ["must be an object"] } })
        const closed = yield* chat("POST", `/conversations/${id}/close`, { bearer: token })
        expect(closed.status).toBe(200)
        const refusedSend = yield* ask(client, sendFrame("late", { text: "x" }), answerTo("late"))
        expect(refusedSend).toMatchObject({ type: "error", code: "conversation_closed", clientId: "late" })
      }))

    it.scoped("over the activity_create limit a send is rate_limited with retryAfterMs", () =>
      Effect.gen(function*() {
        const tenant = yield* createTenant({ limits: { activity_create: { limit: 1, scale_ms: 3_600_000 } } })
        const channel = yield* insertChannel(tenant.id)
        const { token } = yield* startConversation(channel.secret)
        const { client } = yield* joined(token)
        expect((yield* ask(client, sendFrame("r-1", { text: "1" }), answerTo("r-1"))).type).toBe("ack")
        const limited = yield* ask(client, sendFrame("r-2", { text: "2" }), answerTo("r-2"))
        expect(limited).toMatchObject({ type: "error", code: "rate_limited", clientId: "r-2", retryAfterMs: expect.any(Number) })
        // A re-send of an acknowledged clientId still gets its ack over the limit.
        expect(yield* ask(client, sendFrame("r-1", { text: "1" }), answerTo("r-1"))).toMatchObject({ type: "ack", seq: 1 })
      }))

    it.scoped("missing permissions: no read closes after hello; no write refuses sends; no typing refuses typing", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { id } = yield* startConversation(channel.secret)
        const writeOnly = yield* generateToken(channel.secret, { user: { id: "alice" }, permissions: ["write"] })
        const client = yield* connect(yield* baseUrl, { token: writeOnly, conversation_id: id })
        expect(yield* hello(client)).toMatchObject({ type: "error", code: "insufficient_permission", details: { required: ["read"] } })
        expect(yield* closeOf(client)).toEqual({ code: 1008, reason: JSON.stringify({ reason: "insufficient_permission" }) })

        const readOnly = yield* generateToken(channel.secret, { user: { id: "alice" }, permissions: ["read"] })
        const reader = (yield* joined(readOnly, { query: { conversation_id: id } })).client
        expect(yield* ask(reader, sendFrame("w", { text: "x" }), answerTo("w"))).toMatchObject({
          code: "insufficient_permission",
          clientId: "w",
          details: { required: ["write"] }
        })
        expect(yield* ask(reader, { type: "typing" }, (f) => f.type === "error")).toMatchObject({
          code: "insufficient_permission",
          details: { required: ["typing"] }
        })
      }))

    it.scoped("a conversation of another channel or tenant is not_found; a bound token naming another is forbidden; none is bad_request", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const mine = yield* startConversation(channel.secret)
        const otherChannel = yield* insertChannel(tenant.id)
        const foreignInTenant = yield* insertConversation(tenant.id, otherChannel.id)
        const elsewhere = yield* tenantWithChannel
        const foreign = yield* startConversation(elsewhere.channel.secret)
        const url = yield* baseUrl
        const refusedHello = (token: string, query: Record<string, string>) =>
          Effect.gen(function*() {
            const client = yield* connect(url, { token, ...query })
            const answer = yield* hello(client)
            const closed = yield* closeOf(client)
            return { code: answer.code, close: closed.code, frames: client.frames }
          })
        for (const conversation of [foreignInTenant, foreign.id]) {
          const answer = yield* refusedHello(mine.parent, { conversation_id: conversation })
          expect(answer).toMatchObject({ code: "not_found", close: 1008 })
          expect(answer.frames.every((f) => f.type === "error")).toBe(true)
        }
        expect(yield* refusedHello(mine.token, { conversation_id: foreign.id })).toMatchObject({ code: "forbidden", close: 1008 })
        expect(yield* refusedHello(mine.parent, {})).toMatchObject({ code: "bad_request", close: 1008 })
        expect(yield* refusedHello(mine.parent, { conversation_id: "not-a-uuid" })).toMatchObject({ code: "bad_request", close: 1008 })
        // The bound token naming its own conversation (any case) is fine.
        const own = (yield* joined(mine.token, { query: { conversation_id: mine.id.toUpperCase() } })).welcome
        expect(own.data.conversationId).toBe(mine.id)
      }))

    it.scoped("more than 32 unanswered sends: the extra ones are too_many_in_flight, the others are answered", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { id, parent } = yield* startConversation(channel.secret)
        // Not bound to the conversation: each append looks the conversation up first (with its participant).
        const { client } = yield* joined(parent, { query: { conversation_id: id } })
        // The hello counted in this second's 20 frames: the sends start in a window of their own.
        yield* Effect.sleep("1100 millis")
        const answers = yield* Effect.scoped(Effect.gen(function*() {
          // Appends wait for that look-up meanwhile: every send stays unanswered.
          yield* holdTableLocked("participants")
          for (let i = 0; i < 33; i++) {
            // 20 frames a second per socket: the 21st waits for the next window.
            if (i === 20) yield* Effect.sleep("1100 millis")
            client.send(sendFrame(`h-${i}`, { text: `held ${i}` }))
          }
          return yield* client.next(isError("too_many_in_flight"))
        }))
        expect(answers).toMatchObject({ clientId: "h-32" })
        for (let i = 0; i < 32; i++) {
          const answer = yield* client.next(answerTo(`h-${i}`), { within: 30000 })
          expect(answer.code).not.toBe("too_many_in_flight")
        }
        // Retried with the same clientId once the others are answered, it is taken.
        const retried = yield* ask(client, sendFrame("h-32", { text: "held 32" }), answerTo("h-32"))
        expect(retried.type).toBe("ack")
      }), { timeout: 60_000 })
  })

  describe("per-socket limits", () => {
    it.scoped("a frame over 128 KiB is payload_too_large and the socket stays open; over 1 MiB closes 1009", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { token } = yield* startConversation(channel.secret)
        const { client } = yield* joined(token)
        const big = JSON.stringify({ type: "send", clientId: "big", activity: { text: "x".repeat(140 * 1024) } })
        client.sendRaw(big, false)
        expect(yield* client.next(isError("payload_too_large"))).toMatchObject({ details: { max_bytes: 131072 } })
        yield* ask(client, { type: "ping" }, (f) => f.type === "pong")
        client.sendRaw("x".repeat(1024 * 1024 + 1), false)
        expect((yield* closeOf(client)).code).toBe(1009)
      }))

    it.scoped("21 frames in one burst: the 21st is rate_limited with retryAfterMs, the socket stays open", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { token } = yield* startConversation(channel.secret)
        const client = yield* connect(yield* baseUrl, { token })
        for (let i = 0; i < 21; i++) client.send({ type: "ping" })
        const limited = yield* client.next(isError("rate_limited"))
        expect(limited.retryAfterMs).toBeGreaterThan(0)
        expect(limited.retryAfterMs).toBeLessThanOrEqual(1000)
        yield* Effect.sleep("1100 millis")
        yield* ask(client, { type: "ping" }, (f) => f.type === "pong")
        expect(client.frames.filter((f) => f.type === "pong").length).toBe(21)
      }))

    it.scoped("a client that stops reading: typing is dropped past 100 unflushed frames, then 4503 past 1000", () =>
      Effect.gen(function*() {
        const { channel, tenant } = yield* tenantWithChannel
        const { id, token } = yield* startConversation(channel.secret)
        const url = yield* baseUrl
        const { client: slow } = yield* joined(token)
        const typist = (yield* joined(token)).client
        const droppedBefore = yield* metricValue(url, `parley_ephemeral_frames_dropped_total{binding="native"}`)
        const closesBefore = yield* metricValue(url, `parley_socket_closes_total{binding="native",code="4503"}`)
        ;(slow.ws as unknown as { _socket: { pause: () => void; resume: () => void } })._socket.pause()
        // Committed behind the entity's back: the hub's gap check publishes them as live frames.
        const insertBatch = (from: number, to: number) =>
          query(
            `INSERT INTO activities (conversation_id, seq, id, tenant_id, type, sender, text)
             SELECT $1, s, gen_random_uuid(), $2, 'message', 'bot', repeat('x', 20000) FROM generate_series($3::int, $4::int) s`,
            [id, tenant.id, from, to]
          ).pipe(Effect.zipRight(query("UPDATE conversations SET head_seq = $2 WHERE id = $1", [id, to])))
        yield* insertBatch(1, 800)
        yield* eventually(
          Effect.zipRight(
            Effect.sync(() => typist.send({ type: "typing" })),
            metricValue(url, `parley_ephemeral_frames_dropped_total{binding="native"}`)
          ),
          (dropped) => dropped > droppedBefore,
          { what: "typing dropped for the lagging socket" }
        )
        yield* insertBatch(801, 2400)
        yield* eventually(metricValue(url, `parley_socket_closes_total{binding="native",code="4503"}`), (n) => n > closesBefore, {
          what: "slow consumer closed"
        })
        ;(slow.ws as unknown as { _socket: { resume: () => void } })._socket.resume()
        const closed = yield* closeOf(slow, 60_000)
        expect(closed.code).toBe(4503)
        expect(JSON.parse(closed.reason)).toEqual({ reason: "slow_consumer", retryAfterMs: expect.any(Number) })
        // The other listener keeps up and stays open.
        yield* ask(typist, { type: "ping" }, (f) => f.type === "pong")
      }), { timeout: 120_000 })

    it.scoped("revocation closes the token's sockets with 4401; another token of the same user stays open", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { id } = yield* startConversation(channel.secret)
        const first = yield* generateToken(channel.secret, { user: { id: "alice" } })
        const second = yield* generateToken(channel.secret, { user: { id: "alice" } })
        const a = (yield* joined(first, { query: { conversation_id: id } })).client
        const b = (yield* joined(second, { query: { conversation_id: id } })).client
        const revoked = yield* chat("POST", "/tokens/revoke", { bearer: first })
        expect(revoked.status).toBe(200)
        expect(yield* closeOf(a)).toEqual({ code: 4401, reason: JSON.stringify({ reason: "token_revoked" }) })
        yield* ask(b, { type: "ping" }, (f) => f.type === "pong")
      }))

    it.scoped("metrics: open sockets by binding, frames in and out", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { token } = yield* startConversation(channel.secret)
        const url = yield* baseUrl
        const inBefore = yield* metricValue(url, `parley_socket_frames_total{binding="native",direction="in"}`)
        const outBefore = yield* metricValue(url, `parley_socket_frames_total{binding="native",direction="out"}`)
        const openBefore = yield* metricValue(url, `parley_open_sockets{binding="native"}`)
        const client = yield* connect(url, { token })
        yield* ask(client, { type: "ping" }, (f) => f.type === "pong")
        expect(yield* metricValue(url, `parley_open_sockets{binding="native"}`)).toBe(openBefore + 1)
        expect(yield* metricValue(url, `parley_socket_frames_total{binding="native",direction="in"}`)).toBeGreaterThan(inBefore)
        expect(yield* metricValue(url, `parley_socket_frames_total{binding="native",direction="out"}`)).toBeGreaterThan(outBefore)
        client.close()
        yield* closeOf(client)
        yield* eventually(metricValue(url, `parley_open_sockets{binding="native"}`), (n) => n === openBefore, { what: "socket counted closed" })
      }))
  })

  describe("bad input", () => {
    it.scoped("garbage, wrong shapes, unknown types and bad msgpack get error frames; nothing of another conversation arrives", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const mine = yield* startConversation(channel.secret)
        const other = yield* startConversation(channel.secret, { user: { id: "bob" } })
        const json = (yield* joined(mine.token)).client
        const msgpack = (yield* joined(mine.token, { protocols: ["chat.v1+msgpack"] })).client
        const textInputs: Array<string> = [
          "",
          "{",
          "null",
          "[]",
          "42",
          "\"hello\"",
          "{}",
          JSON.stringify({ type: 7 }),
          JSON.stringify({ type: "join" }),
          JSON.stringify({ type: "hello", watermark: 1 }),
          JSON.stringify({ type: "read", seq: "x" }),
          JSON.stringify({ type: "send", clientId: "", activity: {} }),
          JSON.stringify({ type: "send", clientId: "a b", activity: { text: "x" } }),
          JSON.stringify({ type: "send" }),
          JSON.stringify({ type: "auth" }),
          "[".repeat(50000),
          JSON.stringify({ type: "send", clientId: "deep", activity: { payload: JSON.parse("[".repeat(100) + "]".repeat(100)) } })
        ]
        // A small generator of garbage: random bytes and truncations of valid frames, the same each run.
        let seed = 7
        const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648
        const binaryInputs: Array<Buffer> = [
          Buffer.alloc(0),
          Buffer.from([0xc1]),
          Buffer.from([0xd4, 0x05, 0x01]),
          Buffer.from([0xd6, 0xff, 0, 0, 0, 1]),
          Buffer.concat([pack({ type: "ping" }), Buffer.from([0])]),
          Buffer.from(pack({ type: "send", clientId: "t", activity: { text: "x" } })).subarray(0, 10),
          Buffer.alloc(100_000, 0x91),
          Buffer.from([0xdd, 0xff, 0xff, 0xff, 0xff]),
          pack([1, 2, 3]),
          pack({ type: "hello", watermark: 1 }),
          ...Array.from({ length: 20 }, () => Buffer.from(Array.from({ length: 1 + Math.floor(random() * 64) }, () => Math.floor(random() * 256))))
        ]
        const inputs: Array<readonly [NativeClient, string | Buffer, boolean]> = [
          ...textInputs.map((t) => [json, t, false] as const),
          [json, pack({ type: "ping" }), true],
          ...binaryInputs.map((b) => [msgpack, b, true] as const),
          [msgpack, JSON.stringify({ type: "ping" }), false]
        ]
        for (const [client, data, binary] of inputs) {
          const from = client.frames.length
          client.sendRaw(data, binary)
          const answer = yield* client.next((f) => f.type === "error" || f.type === "pong", { from })
          expect(answer.type, `${String(data).slice(0, 40)}`).toBe("error")
          expect(["bad_request", "invalid_message"]).toContain(answer.code)
          // 20 frames a second per socket.
          yield* Effect.sleep("60 millis")
        }
        yield* postText(other.token, other.id, "for bob only")
        yield* postText(mine.token, mine.id, "mine")
        yield* json.next((f) => f.data?.text === "mine")
        yield* msgpack.next((f) => f.data?.text === "mine")
        for (const client of [json, msgpack]) {
          expect(client.frames.some((f) => f.data?.text === "for bob only")).toBe(false)
          expect(client.ws.readyState).toBe(client.ws.OPEN)
        }
      }), { timeout: 60_000 })
  })
})

layer(TestNodeLive({ ...BASE_ENV, SOCKET_IDLE_TIMEOUT_MS: "1500" }), { excludeTestServices: true })("native socket idle timeout", (it) => {
  it.scoped("a socket that sends nothing is closed 4408; one that pings stays open", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const { token } = yield* startConversation(channel.secret)
      const url = yield* baseUrl
      const quiet = yield* connect(url, { token })
      const busy = yield* connect(url, { token })
      const pinging = yield* Effect.forkScoped(Effect.forever(Effect.zipRight(Effect.sync(() => busy.send({ type: "ping" })), Effect.sleep("300 millis"))))
      expect(yield* closeOf(quiet)).toEqual({ code: 4408, reason: JSON.stringify({ reason: "idle_timeout" }) })
      expect(busy.ws.readyState).toBe(busy.ws.OPEN)
      yield* Fiber.interrupt(pinging)
    }))

  it.scoped("a half-open connection (upgraded, then silent, never reading) is closed by the idle timeout", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const { token } = yield* startConversation(channel.secret)
      const url = yield* baseUrl
      const openBefore = yield* metricValue(url, `parley_open_sockets{binding="native"}`)
      const target = new URL(socketUrl(url, { token }))
      const received: Array<Buffer> = []
      const ended = yield* Effect.async<void>((resume) => {
        const socket = createConnection({ host: target.hostname, port: Number(target.port) }, () => {
          socket.write(
            `GET ${target.pathname}${target.search} HTTP/1.1\r\nHost: ${target.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
              `Sec-WebSocket-Key: ${Buffer.from("0123456789abcdef").toString("base64")}\r\nSec-WebSocket-Version: 13\r\n` +
              `Sec-WebSocket-Protocol: chat.v1\r\n\r\n`
          )
        })
        socket.on("data", (chunk) => received.push(chunk))
        socket.on("error", () => undefined)
        // Never answers the close frame: the server must end the connection itself.
        socket.on("close", () => resume(Effect.void))
      }).pipe(Effect.timeout("20 seconds"), Effect.option)
      const bytes = Buffer.concat(received)
      expect(bytes.toString("latin1")).toContain("101 Switching Protocols")
      const frameStart = bytes.indexOf("\r\n\r\n") + 4
      // A close frame (0x88) with code 4408.
      expect(bytes[frameStart]).toBe(0x88)
      expect(bytes.readUInt16BE(frameStart + 2)).toBe(4408)
      expect(ended._tag).toBe("Some")
      // Cut after the close grace, well before the 30 s `ws` would wait for the close frame that never comes.
      yield* eventually(metricValue(url, `parley_open_sockets{binding="native"}`), (n) => n === openBefore, {
        what: "socket counted closed",
        within: "20 seconds"
      })
    }), { timeout: 90_000 })
})

layer(TestNodeLive({ ...BASE_ENV, TOKEN_TTL_SECONDS: "4" }), { excludeTestServices: true })("native socket token expiry", (it) => {
  it.scoped("an expired token closes 4401 token_expired; refreshed in band, the socket outlives it", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const { id } = yield* startConversation(channel.secret)
      const first = yield* generateToken(channel.secret, { user: { id: "alice" } })
      const kept = (yield* joined(first, { query: { conversation_id: id } })).client
      const lapsing = (yield* joined(first, { query: { conversation_id: id } })).client
      const expiresAt = JSON.parse(Buffer.from(first.split(".")[1]!, "base64url").toString("utf8")).exp * 1000
      // Expiry is in whole seconds: a token made two seconds later expires at least two seconds later.
      yield* Effect.sleep("2000 millis")
      const fresh = yield* generateToken(channel.secret, { user: { id: "alice" } })
      const ok = yield* ask(kept, { type: "auth", token: fresh }, (f) => f.type === "authOk" || f.type === "error")
      expect(ok.type).toBe("authOk")
      expect(ok.expiresAt).toBeGreaterThanOrEqual(expiresAt + 2000)
      expect(yield* closeOf(lapsing)).toEqual({ code: 4401, reason: JSON.stringify({ reason: "token_expired" }) })
      // The sweep that ended the first token's socket left the refreshed one open, past that expiry.
      expect(Date.now()).toBeGreaterThanOrEqual(expiresAt)
      expect(kept.ws.readyState).toBe(kept.ws.OPEN)
      expect(yield* closeOf(kept)).toEqual({ code: 4401, reason: JSON.stringify({ reason: "token_expired" }) })
    }), { timeout: 60_000 })
})

layer(TestNodeLive({ ...BASE_ENV, DATABASE_STATEMENT_TIMEOUT_MS: "1000", SSE_HEARTBEAT_MS: "300" }), { excludeTestServices: true })(
  "native socket and the database",
  (it) => {
    it.scoped("the database unavailable at hello: error unavailable with retryAfterMs, then close 1013", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { token } = yield* startConversation(channel.secret)
        const client = yield* connect(yield* baseUrl, { token })
        const answer = yield* Effect.scoped(Effect.zipRight(holdTableLocked("conversations"), hello(client)))
        expect(answer).toMatchObject({ type: "error", code: "unavailable", retryAfterMs: expect.any(Number) })
        const closed = yield* closeOf(client)
        expect(closed.code).toBe(1013)
        expect(JSON.parse(closed.reason)).toEqual({ reason: "unavailable", retryAfterMs: answer.retryAfterMs })
      }))

    it.scoped("a replay that cannot read: replay_unavailable with the watermark, the socket stays open and resumes", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { id, token } = yield* startConversation(channel.secret)
        yield* postText(token, id, "one")
        yield* postText(token, id, "two")
        const client = yield* connect(yield* baseUrl, { token })
        const failed = yield* Effect.scoped(Effect.gen(function*() {
          yield* holdTableLocked("activities")
          const welcome = yield* hello(client, 1)
          expect(welcome).toMatchObject({ type: "welcome", data: { headSeq: 2 } })
          return yield* client.next(isError("replay_unavailable"))
        }))
        expect(failed).toMatchObject({ details: { watermark: 1 }, retryAfterMs: expect.any(Number) })
        expect(yield* client.next(activityAt(2))).toMatchObject({ data: { text: "two" } })
        expect(client.frames.some(activityAt(1))).toBe(false)
        yield* postText(token, id, "three")
        yield* client.next(activityAt(3))
      }))

    it.scoped("heartbeats come every heartbeatIntervalMs with the last seq sent", () =>
      Effect.gen(function*() {
        const { channel } = yield* tenantWithChannel
        const { id, token } = yield* startConversation(channel.secret)
        yield* postText(token, id, "one")
        const { client, welcome } = yield* joined(token)
        expect(welcome.data.heartbeatIntervalMs).toBe(300)
        yield* client.next(activityAt(1))
        const from = client.frames.length
        expect(yield* client.next((f) => f.type === "heartbeat", { from })).toMatchObject({ headSeq: 1 })
      }))
  }
)

describe("native socket during a drain", () => {
  it.live("new upgrades get 503; sockets that said hello close 1012, the others 1001, counted in the metrics", () =>
    Effect.gen(function*() {
      const db = yield* TestDatabase
      const node = yield* spawnNode("drain", {
        DATABASE_URL: db.url!,
        TOKEN_SIGNING_KEY: SIGNING_KEY,
        DRAIN_REFUSE_MS: "2000",
        DRAIN_BATCH_SIZE: "1",
        DRAIN_BATCH_INTERVAL_MS: "2000"
      })
      const call = (method: string, path: string, headers: Record<string, string>, body?: unknown) =>
        Effect.promise(async () => {
          const response = await fetch(`${node.baseUrl}${path}`, {
            method,
            headers: { ...headers, "content-type": "application/json" },
            ...(body === undefined ? {} : { body: JSON.stringify(body) })
          })
          return (await response.json()) as any
        })
      const tenant = yield* call("POST", "/api/v1/admin/tenants", { authorization: `Bearer ${ADMIN_TOKEN}` }, { tenant: { name: "drain" } })
      const channel = yield* call("POST", "/api/v1/manage/channels", { "x-api-key": tenant.data.api_key }, {
        channel: { name: "socket", type: "websocket" }
      })
      const generated = yield* call("POST", "/api/v1/chat/tokens/generate", { authorization: `Bearer ${channel.data.secret}` }, {
        user: { id: "alice" }
      })
      const created = yield* call("POST", "/api/v1/chat/conversations", { authorization: `Bearer ${generated.token}` })
      const token = created.token as string
      const unjoined = yield* connect(node.baseUrl, { token })
      yield* ask(unjoined, { type: "ping" }, (f) => f.type === "pong")
      const first = (yield* Effect.flatMap(connect(node.baseUrl, { token }), (c) => Effect.as(hello(c), c)))
      const second = (yield* Effect.flatMap(connect(node.baseUrl, { token }), (c) => Effect.as(hello(c), c)))

      node.child.kill("SIGTERM")
      const refusedNow = yield* eventually(
        tryConnect(node.baseUrl, { token }).pipe(Effect.tap((r) => ("ws" in r ? Effect.sync(() => r.ws.terminate()) : Effect.void))),
        (r) => !("ws" in r),
        { what: "upgrade refused while draining" }
      )
      expect(refusedNow).toMatchObject({ status: 503, body: { error: { code: "unavailable", details: { reason: "draining" } } } })

      expect(yield* closeOf(unjoined)).toEqual({ code: 1001, reason: "" })
      const closedFirst = yield* closeOf(first)
      expect(closedFirst.code).toBe(1012)
      expect(JSON.parse(closedFirst.reason)).toEqual({ reason: "unavailable", retryAfterMs: expect.any(Number) })
      // The second joined socket is in the next batch: the node still answers meanwhile.
      expect(second.ws.readyState).toBe(second.ws.OPEN)
      expect(yield* metricValue(node.baseUrl, `parley_socket_closes_total{binding="native",code="1012"}`)).toBe(1)
      expect(yield* metricValue(node.baseUrl, `parley_socket_closes_total{binding="native",code="1001"}`)).toBe(1)
      expect((yield* closeOf(second)).code).toBe(1012)
    }).pipe(Effect.scoped, Effect.provide(TestDatabaseLive)), { timeout: 120_000 })
})
