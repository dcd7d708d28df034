import { Effect } from "effect"
import { type Channel, Socket } from "phoenix"
import WebSocket from "ws"
import { TestNode } from "./TestNode.js"

/** An answer to a join or push, as the Phoenix JS client hands it over. */
export interface Answer {
  readonly status: "ok" | "error" | "timeout"
  readonly response: any
}

/** Every message the socket received, decoded, in order; and how it closed. */
export interface Recorded {
  readonly socket: Socket
  readonly messages: Array<{ topic: string; event: string; payload: any; ref: string | null; join_ref: string | null }>
  readonly closes: Array<{ code: number; reason: string }>
}

/**
 * The unchanged `phoenix` npm client on `ws`, connected to `prefix` (it appends `/websocket`) of the test
 * node; disconnected with the scope. Reconnects are slowed down so a test sees the close it caused.
 */
export const phoenixSocket = (prefix: "/socket/chat" | "/socket", params: Record<string, string>) =>
  Effect.flatMap(TestNode, ({ baseUrl }) =>
    Effect.acquireRelease(
      Effect.sync((): Recorded => {
        const socket = new Socket(`${baseUrl.replace("http", "ws")}${prefix}`, {
          transport: WebSocket as any,
          params,
          reconnectAfterMs: () => 60_000,
          rejoinAfterMs: () => 60_000,
          timeout: 5_000
        })
        const recorded: Recorded = { socket, messages: [], closes: [] }
        socket.onMessage((message: any) => {
          recorded.messages.push(message)
        })
        socket.onClose((event: any) => {
          recorded.closes.push({ code: event.code, reason: event.reason })
        })
        socket.connect()
        return recorded
      }),
      ({ socket }) => Effect.sync(() => socket.disconnect())
    ))

/** What `push` (a join or a push) was answered. */
const answerOf = (push: ReturnType<Channel["push"]>) =>
  Effect.promise(() =>
    new Promise<Answer>((resolve) => {
      push
        .receive("ok", (response: any) => resolve({ status: "ok", response }))
        .receive("error", (response: any) => resolve({ status: "error", response }))
        .receive("timeout", () => resolve({ status: "timeout", response: null }))
    })
  )

export const join = (channel: Channel) => answerOf(channel.join())
export const leave = (channel: Channel) => answerOf(channel.leave())
export const push = (channel: Channel, event: string, payload: object) => answerOf(channel.push(event, payload))

/** The payloads of `event` on `topic` received so far. */
export const eventsOf = (recorded: Recorded, topic: string, event: string) =>
  recorded.messages.filter((m) => m.topic === topic && m.event === event).map((m) => m.payload)

/** A raw `ws` client speaking the Phoenix array format by hand, for what the JS client never sends. */
export interface RawClient {
  readonly ws: WebSocket
  readonly messages: Array<[string | null, string | null, string, string, any]>
  readonly other: Array<string>
  readonly closed: Promise<{ code: number; reason: string }>
  readonly send: (frame: string | Buffer) => void
}

export const rawSocket = (path: string, params: Record<string, string>) =>
  Effect.flatMap(TestNode, ({ baseUrl }) =>
    Effect.acquireRelease(
      Effect.promise(() =>
        new Promise<RawClient>((resolve, reject) => {
          const ws = new WebSocket(`${baseUrl.replace("http", "ws")}${path}?${new URLSearchParams(params)}`)
          const messages: RawClient["messages"] = []
          const other: Array<string> = []
          const closed = new Promise<{ code: number; reason: string }>((done) =>
            ws.on("close", (code, reason) => done({ code, reason: reason.toString("utf8") }))
          )
          ws.on("message", (data) => {
            const text = data.toString()
            try {
              messages.push(JSON.parse(text))
            } catch {
              other.push(text)
            }
          })
          ws.on("error", () => undefined)
          ws.on("open", () => resolve({ ws, messages, other, closed, send: (frame) => ws.send(frame) }))
          ws.on("unexpected-response", (_request, response) => reject(new Error(`upgrade refused: ${response.statusCode}`)))
        })
      ),
      ({ ws }) => Effect.sync(() => ws.terminate())
    ))

/** Waits (generously) until `holds` is true of the client's state, polling every 20 ms. */
export const until = (holds: () => boolean, what: string, withinMs = 15_000) =>
  Effect.promise(() =>
    new Promise<void>((resolve, reject) => {
      const started = Date.now()
      const check = () => {
        if (holds()) return resolve()
        if (Date.now() - started > withinMs) return reject(new Error(`still not so: ${what}`))
        setTimeout(check, 20)
      }
      check()
    })
  )

/** The reply the raw client got to `ref`. */
export const replyTo = (client: RawClient, ref: string) =>
  Effect.map(
    until(() => client.messages.some((m) => m[1] === ref && m[3] === "phx_reply"), `a reply to ref ${ref}`),
    () => client.messages.find((m) => m[1] === ref && m[3] === "phx_reply")![4] as { status: string; response: any }
  )

/** How the node answers an upgrade it refuses: status and JSON body ("open" when it accepted). */
export const upgradeAnswer = (path: string, params: Record<string, string>) =>
  Effect.flatMap(TestNode, ({ baseUrl }) =>
    Effect.promise(() =>
      new Promise<{ status: number; body: any } | "open">((resolve) => {
        const ws = new WebSocket(`${baseUrl.replace("http", "ws")}${path}?${new URLSearchParams(params)}`)
        ws.on("error", () => undefined)
        ws.on("open", () => {
          ws.terminate()
          resolve("open")
        })
        ws.on("unexpected-response", (_request, response) => {
          let body = ""
          response.on("data", (chunk: Buffer) => {
            body += chunk.toString("utf8")
          })
          response.on("end", () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(body) }))
        })
      })
    ))
