import { Effect } from "effect"
import { pack, unpack } from "msgpackr"
import { WebSocket } from "ws"

/** A raw `ws` client of the native socket: every frame it got, decoded, and how it closed. */
export interface NativeClient {
  readonly ws: WebSocket
  readonly protocol: string
  readonly frames: Array<any>
  /** Sends an object in the socket's format (msgpack binary for `chat.v1+msgpack`, JSON text otherwise). */
  readonly send: (frame: unknown) => void
  /** Sends raw bytes or text as they are. */
  readonly sendRaw: (data: string | Buffer, binary: boolean) => void
  /** The first frame (after `from`, an index into `frames`) that matches; fails after `within` ms. */
  readonly next: (matches: (frame: any) => boolean, options?: { readonly from?: number; readonly within?: number }) => Effect.Effect<any>
  readonly closed: Promise<{ readonly code: number; readonly reason: string }>
  readonly close: () => void
}

/** The refusal of an upgrade: status and JSON body. */
export interface Refusal {
  readonly status: number
  readonly body: any
}

export const socketUrl = (baseUrl: string, query: Record<string, string>) =>
  `${baseUrl.replace(/^http/, "ws")}/socket/chat/v1?${new URLSearchParams(query).toString()}`

/** Opens a socket; a refused upgrade is the Left of its status and body. */
export const tryConnect = (
  baseUrl: string,
  query: Record<string, string>,
  protocols: ReadonlyArray<string> = ["chat.v1+json"],
  headers: Record<string, string> = {}
): Effect.Effect<NativeClient | Refusal> =>
  Effect.async<NativeClient | Refusal>((resume) => {
    const ws = new WebSocket(socketUrl(baseUrl, query), [...protocols], { headers, maxPayload: 256 * 1024 * 1024 })
    const frames: Array<any> = []
    const waiters = new Set<() => void>()
    const closed = new Promise<{ code: number; reason: string }>((resolve) =>
      ws.on("close", (code, reason) => {
        resolve({ code, reason: reason.toString("utf8") })
        for (const wake of waiters) wake()
      })
    )
    ws.on("error", () => undefined)
    ws.on("message", (data, binary) => {
      const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data)
      frames.push(binary ? unpack(bytes) : JSON.parse(bytes.toString("utf8")))
      for (const wake of waiters) wake()
    })
    ws.on("unexpected-response", (_request, response) => {
      let body = ""
      response.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")))
      response.on("end", () => {
        let parsed: unknown = body
        try {
          parsed = JSON.parse(body)
        } catch {
          // not JSON
        }
        resume(Effect.succeed({ status: response.statusCode ?? 0, body: parsed }))
      })
    })
    ws.on("open", () => {
      const msgpack = ws.protocol === "chat.v1+msgpack"
      const client: NativeClient = {
        ws,
        protocol: ws.protocol,
        frames,
        send: (frame) => ws.send(msgpack ? pack(frame) : JSON.stringify(frame), { binary: msgpack }),
        sendRaw: (data, binary) => ws.send(data, { binary }),
        next: (matches, options = {}) =>
          Effect.async<any>((resumeNext) => {
            const from = options.from ?? 0
            let timer: NodeJS.Timeout | undefined
            const look = () => {
              const found = frames.slice(from).find(matches)
              if (found === undefined && ws.readyState !== WebSocket.CLOSED) return false
              waiters.delete(look)
              clearTimeout(timer)
              resumeNext(
                found === undefined
                  ? Effect.dieMessage(`socket closed without the frame; got ${JSON.stringify(frames).slice(0, 2000)}`)
                  : Effect.succeed(found)
              )
              return true
            }
            if (look()) return
            waiters.add(look)
            timer = setTimeout(() => {
              waiters.delete(look)
              resumeNext(Effect.dieMessage(`no such frame within ${options.within ?? 15000} ms; got ${JSON.stringify(frames).slice(0, 2000)}`))
            }, options.within ?? 15000)
          }),
        closed,
        close: () => ws.close()
      }
      resume(Effect.succeed(client))
    })
  })

const isClient = (value: NativeClient | Refusal): value is NativeClient => "ws" in value

/** Opens a socket that must be accepted; it is closed when the scope closes. */
export const connect = (baseUrl: string, query: Record<string, string>, protocols?: ReadonlyArray<string>) =>
  Effect.acquireRelease(
    Effect.flatMap(tryConnect(baseUrl, query, protocols), (result) =>
      isClient(result) ? Effect.succeed(result) : Effect.dieMessage(`upgrade refused: ${result.status} ${JSON.stringify(result.body)}`)),
    (client) => Effect.sync(() => client.ws.terminate())
  )

/** Opens a socket that must be refused. */
export const refused = (baseUrl: string, query: Record<string, string>, protocols?: ReadonlyArray<string>, headers?: Record<string, string>) =>
  Effect.flatMap(tryConnect(baseUrl, query, protocols, headers), (result) =>
    isClient(result)
      ? Effect.sync(() => result.ws.terminate()).pipe(Effect.zipRight(Effect.dieMessage("upgrade accepted")))
      : Effect.succeed(result))

/** The socket's close, within `within` ms. */
export const closeOf = (client: NativeClient, within = 15000) =>
  Effect.promise(() => client.closed).pipe(
    Effect.timeoutFail({ duration: within, onTimeout: () => new Error("the socket did not close") }),
    Effect.orDie
  )

/** `hello`, and the `welcome` it is answered with. */
export const hello = (client: NativeClient, watermark?: unknown) =>
  Effect.suspend(() => {
    const from = client.frames.length
    client.send(watermark === undefined ? { type: "hello" } : { type: "hello", watermark })
    return client.next((f) => f.type === "welcome" || f.type === "error", { from })
  })

/** The value of a metric series in the node's `/metrics` text (0 when absent). */
export const metricValue = (baseUrl: string, series: string) =>
  Effect.promise(async () => {
    const text = await (await fetch(`${baseUrl}/metrics`)).text()
    const line = text.split("\n").find((l) => l.startsWith(`${series} `))
    return line === undefined ? 0 : Number(line.slice(series.length + 1))
  })
