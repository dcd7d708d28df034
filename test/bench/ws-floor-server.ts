/**
 * The floor test/bench/realtime.ts compares Parley's realtime delivery with: a bare `ws` server
 * and node:http in one process, nothing else. Run as a child process (env FLOOR_PORT).
 *
 * - Any WebSocket upgrade is accepted (no auth); a Phoenix `phx_join` array is answered
 *   `phx_reply` `{status: "ok"}` and the socket follows that topic; `heartbeat` is answered too.
 * - `GET /api/v1/chat/conversations/<id>/events` is an SSE stream of that conversation.
 * - `POST /api/v1/conversations/<id>/activities` `{text}` numbers the activity (a counter per
 *   conversation, in memory: no database), answers 201 `{data: activity}`, then sends it to the
 *   conversation's sockets as one `activitySet` (serialized once, as Phoenix's fastlane does) and to
 *   its streams as one event named `text` with the seq as its id.
 */
import { randomUUID } from "node:crypto"
import { createServer, type ServerResponse } from "node:http"
import { WebSocket, WebSocketServer } from "ws"

const port = Number(process.env["FLOOR_PORT"] ?? "0")
const POST = /^\/api\/v1\/conversations\/([0-9a-f-]{36})\/activities$/
const EVENTS = /^\/api\/v1\/chat\/conversations\/([0-9a-f-]{36})\/events$/
const TOPIC_PREFIX = "chat:conversation:"

const sockets = new Map<string, Set<WebSocket>>()
const streams = new Map<string, Set<ServerResponse>>()
const seqs = new Map<string, number>()

const follow = <A>(map: Map<string, Set<A>>, key: string, value: A) => {
  let set = map.get(key)
  if (set === undefined) map.set(key, set = new Set())
  set.add(value)
}

const unfollow = <A>(map: Map<string, Set<A>>, key: string, value: A) => {
  const set = map.get(key)
  set?.delete(value)
  if (set?.size === 0) map.delete(key)
}

const reply = (res: ServerResponse, status: number, body: unknown) => {
  const text = JSON.stringify(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
  res.end(text)
}

const broadcast = (conversationId: string, activity: { readonly seq: number }) => {
  const topic = `${TOPIC_PREFIX}${conversationId}`
  const watermark = Buffer.from(`seq:${activity.seq}`).toString("base64url")
  const followers = sockets.get(topic)
  if (followers !== undefined) {
    const frame = JSON.stringify([null, null, topic, "activitySet", { activities: [activity], watermark, has_more: false }])
    for (const ws of followers) ws.send(frame)
  }
  const listeners = streams.get(conversationId)
  if (listeners !== undefined) {
    const event = `event: text\nid: ${activity.seq}\ndata: ${JSON.stringify(activity)}\n\n`
    for (const res of listeners) res.write(event)
  }
}

const server = createServer((req, res) => {
  const path = (req.url ?? "").split("?")[0]!
  const post = req.method === "POST" ? POST.exec(path) : null
  if (post !== null) {
    const conversationId = post[1]!
    const chunks: Array<Buffer> = []
    req.on("data", (chunk: Buffer) => chunks.push(chunk))
    req.on("end", () => {
      let text: unknown
      try {
        text = (JSON.parse(Buffer.concat(chunks).toString("utf8")) as { text?: unknown }).text
      } catch {
        return reply(res, 400, { error: { code: "bad_request" } })
      }
      if (typeof text !== "string") return reply(res, 422, { error: { code: "invalid_message" } })
      const seq = (seqs.get(conversationId) ?? 0) + 1
      seqs.set(conversationId, seq)
      const activity = {
        id: randomUUID(),
        seq,
        type: "message",
        text,
        sender: "user",
        conversation_id: conversationId,
        inserted_at: new Date().toISOString()
      }
      reply(res, 201, { data: activity })
      broadcast(conversationId, activity)
    })
    return
  }
  const events = req.method === "GET" ? EVENTS.exec(path) : null
  if (events !== null) {
    const conversationId = events[1]!
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
    res.write("retry: 3000\n\n")
    follow(streams, conversationId, res)
    res.on("close", () => unfollow(streams, conversationId, res))
    return
  }
  req.resume()
  reply(res, req.method === "GET" && path === "/" ? 200 : 404, {})
})

const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false })
server.on("upgrade", (req, socket, head) => {
  wss.handleUpgrade(req, socket, head, (ws) => {
    const topics = new Set<string>()
    ws.on("message", (raw: Buffer) => {
      let frame: unknown
      try {
        frame = JSON.parse(raw.toString("utf8"))
      } catch {
        return
      }
      if (!Array.isArray(frame) || frame.length !== 5) return
      const [joinRef, ref, topic, event] = frame as [unknown, unknown, unknown, unknown]
      if (typeof topic !== "string") return
      if (event === "phx_join" && topic.startsWith(TOPIC_PREFIX)) {
        topics.add(topic)
        follow(sockets, topic, ws)
      }
      if (event === "phx_join" || event === "heartbeat") {
        ws.send(JSON.stringify([joinRef, ref, topic, "phx_reply", { status: "ok", response: {} }]))
      }
    })
    ws.on("close", () => {
      for (const topic of topics) unfollow(sockets, topic, ws)
    })
    ws.on("error", () => undefined)
  })
})

server.listen(port, "127.0.0.1")

const stop = () => {
  for (const ws of wss.clients) ws.terminate()
  server.closeAllConnections()
  server.close(() => process.exit(0))
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
