/**
 * A listener process of test/bench/realtime.ts: holds Phoenix-binding sockets (raw `ws` clients
 * speaking the JSON arrays of protocol 2.0.0, not the phoenix JS client, too heavy for 20,000
 * sockets) and SSE streams, and counts or timestamps the activities they receive. Driven over the
 * IPC channel by `ClientCommand`s, each answered by one `ClientReply` with the same `id`.
 *
 * Times are `monotonicMs()` (CLOCK_MONOTONIC, the same clock in every process of the machine), so
 * the bench can subtract its acknowledgement times from the receipt times recorded here.
 */
import { request } from "node:http"
import WebSocket from "ws"
import { monotonicMs } from "./measure.js"

export type ClientCommand =
  | {
    readonly op: "phoenix"
    readonly id: number
    /** ws://host:port/socket/chat/websocket?token=…&vsn=2.0.0 */
    readonly url: string
    /** One socket per conversation id listed (ids may repeat), each joining `chat:conversation:<id>`. */
    readonly conversations: ReadonlyArray<string>
    /** Sockets connecting or joining at once. */
    readonly concurrency: number
    /** Failed joins after which the rest are not tried (a node that falls over would time every one out). */
    readonly maxFailures: number
  }
  | {
    readonly op: "sse"
    readonly id: number
    readonly port: number
    /** One stream per path (`/api/v1/chat/conversations/<id>/events?token=…`). */
    readonly paths: ReadonlyArray<string>
    readonly concurrency: number
  }
  /** Timestamps every activity received from now on (`on: true`) or no longer. */
  | { readonly op: "record"; readonly id: number; readonly on: boolean }
  /** The receipts recorded so far (and forgets them). */
  | { readonly op: "collect"; readonly id: number }
  | { readonly op: "stats"; readonly id: number }
  | { readonly op: "closeAll"; readonly id: number }

export interface ClientStats {
  readonly sockets: number
  readonly streams: number
  /** Activities received (counted, not parsed) since the process started. */
  readonly activities: number
  readonly closes: Readonly<Record<string, number>>
  readonly errors: number
  readonly errorSamples: ReadonlyArray<string>
}

export interface Receipts {
  /** Activity ids, the listener kind ("ws" or "sse") and the receipt times, index by index. */
  readonly ids: ReadonlyArray<string>
  readonly kinds: ReadonlyArray<"ws" | "sse">
  readonly times: ReadonlyArray<number>
}

export type ClientReply =
  | {
    readonly id: number
    readonly ok: true
    readonly opened?: number
    /** Not opened: failed or not tried. */
    readonly failed?: number
    readonly untried?: number
    readonly ms?: number
  }
  | { readonly id: number; readonly ok: true; readonly stats: ClientStats }
  | { readonly id: number; readonly ok: true; readonly receipts: Receipts }
  | { readonly id: number; readonly ok: false; readonly error: string }

// ---------------------------------------------------------------------------------------------

const HEARTBEAT_MS = 30_000
const OPEN_TIMEOUT_MS = 15_000

const sockets = new Set<WebSocket>()
const streams = new Set<{ destroy: () => void }>()
const closes: Record<string, number> = {}
let errors = 0
const errorSamples: Array<string> = []
let activities = 0
let recording = false
let receipts: { ids: Array<string>; kinds: Array<"ws" | "sse">; times: Array<number> } = { ids: [], kinds: [], times: [] }

/** Set while the bench closes everything: what breaks then is no error. */
let closingAll = false

const fail = (message: string) => {
  if (closingAll) return
  errors += 1
  if (errorSamples.length < 5) errorSamples.push(message)
}

const SEQ_KEY = Buffer.from('"seq":')
const ACTIVITY_SET = Buffer.from('"activitySet"')

/** Occurrences of `"seq":` in a frame: one per activity of an `activitySet` (its watermark is a string). */
const countSeqs = (data: Buffer) => {
  let n = 0
  let at = data.indexOf(SEQ_KEY)
  while (at >= 0) {
    n += 1
    at = data.indexOf(SEQ_KEY, at + SEQ_KEY.length)
  }
  return n
}

const record = (id: unknown, kind: "ws" | "sse", at: number) => {
  if (typeof id !== "string") return
  receipts.ids.push(id)
  receipts.kinds.push(kind)
  receipts.times.push(at)
}

/**
 * Runs `open` for each item, `concurrency` at a time, until `maxFailures` have failed; resolves with
 * how many succeeded and how many were not tried.
 */
const inBatches = async <A>(
  items: ReadonlyArray<A>,
  concurrency: number,
  maxFailures: number,
  open: (item: A, index: number) => Promise<boolean>
) => {
  let next = 0
  let opened = 0
  let failures = 0
  const worker = async () => {
    while (next < items.length && failures < maxFailures) {
      const index = next++
      if (await open(items[index]!, index)) opened += 1
      else failures += 1
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, concurrency) }, worker))
  return { opened, untried: items.length - next }
}

let ref = 0

/** One socket joined to `chat:conversation:<id>`: true once the join is answered `ok`. */
const openPhoenix = (url: string, conversationId: string) =>
  new Promise<boolean>((resolveOpen) => {
    const topic = `chat:conversation:${conversationId}`
    const joinRef = String(++ref)
    const ws = new WebSocket(url, { perMessageDeflate: false })
    let settled = false
    const settle = (ok: boolean, why?: string) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      if (!ok) {
        fail(`join ${conversationId}: ${why ?? "failed"}`)
        ws.terminate()
      }
      resolveOpen(ok)
    }
    const timer = setTimeout(() => settle(false, "no join reply within 15 s"), OPEN_TIMEOUT_MS)
    ws.on("open", () => {
      sockets.add(ws)
      nextBeat.set(ws, Date.now() + Math.random() * HEARTBEAT_MS)
      ws.send(JSON.stringify([joinRef, joinRef, topic, "phx_join", {}]))
    })
    ws.on("message", (raw: Buffer, isBinary: boolean) => {
      const at = monotonicMs()
      if (isBinary) return
      if (!settled) {
        // The join reply: [join_ref, ref, topic, "phx_reply", {status, response}].
        try {
          const frame = JSON.parse(raw.toString("utf8")) as [unknown, unknown, unknown, unknown, { status?: unknown }]
          if (frame[3] === "phx_reply" && frame[1] === joinRef) {
            settle(frame[4]?.status === "ok", JSON.stringify(frame[4]))
            return
          }
        } catch {
          return settle(false, "unparsable frame")
        }
      }
      if (raw.indexOf(ACTIVITY_SET) < 0) return
      if (!recording) {
        activities += countSeqs(raw)
        return
      }
      const frame = JSON.parse(raw.toString("utf8")) as [unknown, unknown, unknown, unknown, { activities?: ReadonlyArray<{ id?: unknown }> }]
      for (const activity of frame[4]?.activities ?? []) {
        activities += 1
        record(activity.id, "ws", at)
      }
    })
    ws.on("close", (code) => {
      sockets.delete(ws)
      nextBeat.delete(ws)
      closes[String(code)] = (closes[String(code)] ?? 0) + 1
      settle(false, `closed ${code}`)
    })
    ws.on("error", (error) => settle(false, error.message))
  })

/** When each socket sends its next heartbeat: the first within 30 s of its open, spread at random. */
const nextBeat = new Map<WebSocket, number>()

/** Heartbeats on topic `phoenix`, every socket every 30 s (the node closes sockets idle for 60 s). */
setInterval(() => {
  const now = Date.now()
  for (const [ws, due] of nextBeat) {
    if (due > now) continue
    nextBeat.set(ws, now + HEARTBEAT_MS)
    if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify([null, String(++ref), "phoenix", "heartbeat", {}]))
  }
}, 1000).unref()

/** One SSE stream: true once the response is 200. */
const openStream = (port: number, path: string) =>
  new Promise<boolean>((resolveOpen) => {
    let buffered = ""
    const req = request({ host: "127.0.0.1", port, path, agent: false, headers: { accept: "text/event-stream" } }, (res) => {
      if (res.statusCode !== 200) {
        fail(`stream ${path.split("?")[0]}: ${res.statusCode}`)
        res.resume()
        return resolveOpen(false)
      }
      const handle = { destroy: () => req.destroy() }
      streams.add(handle)
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => {
        const at = monotonicMs()
        buffered += chunk
        let end = buffered.indexOf("\n\n")
        while (end >= 0) {
          const event = buffered.slice(0, end)
          buffered = buffered.slice(end + 2)
          end = buffered.indexOf("\n\n")
          // Persistent frames (activities) carry their seq as the event id.
          if (!event.startsWith("id:") && !event.includes("\nid:")) continue
          activities += 1
          if (!recording) continue
          const data = event.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n")
          try {
            record((JSON.parse(data) as { id?: unknown }).id, "sse", at)
          } catch {
            fail("unparsable SSE data")
          }
        }
      })
      res.on("error", () => undefined)
      res.on("close", () => {
        streams.delete(handle)
        if (!closingAll) closes["sse"] = (closes["sse"] ?? 0) + 1
      })
      resolveOpen(true)
    })
    // Only the wait for the answer is bounded: an open stream is quiet for as long as nobody posts.
    const timer = setTimeout(() => req.destroy(new Error("no answer within 15 s")), OPEN_TIMEOUT_MS)
    req.on("response", () => clearTimeout(timer))
    req.on("error", (error) => {
      clearTimeout(timer)
      fail(`stream: ${error.message}`)
      resolveOpen(false)
    })
    req.end()
  })

const handle = async (command: ClientCommand): Promise<ClientReply> => {
  switch (command.op) {
    case "phoenix": {
      const started = monotonicMs()
      const { opened, untried } = await inBatches(command.conversations, command.concurrency, command.maxFailures, (id) => openPhoenix(command.url, id))
      return { id: command.id, ok: true, opened, failed: command.conversations.length - opened, untried, ms: monotonicMs() - started }
    }
    case "sse": {
      const started = monotonicMs()
      const { opened } = await inBatches(command.paths, command.concurrency, Number.POSITIVE_INFINITY, (path) => openStream(command.port, path))
      return { id: command.id, ok: true, opened, failed: command.paths.length - opened, ms: monotonicMs() - started }
    }
    case "record":
      recording = command.on
      return { id: command.id, ok: true }
    case "collect": {
      const collected = receipts
      receipts = { ids: [], kinds: [], times: [] }
      return { id: command.id, ok: true, receipts: collected }
    }
    case "stats":
      return {
        id: command.id,
        ok: true,
        stats: { sockets: sockets.size, streams: streams.size, activities, closes: { ...closes }, errors, errorSamples: [...errorSamples] }
      }
    case "closeAll": {
      closingAll = true
      const closing = [...sockets].map((ws) => new Promise<void>((r) => {
        ws.once("close", () => r())
        ws.terminate()
      }))
      for (const stream of streams) stream.destroy()
      streams.clear()
      await Promise.all(closing)
      await new Promise((r) => setTimeout(r, 200))
      // What the bench closed is not a close it should report; each scenario reports its own errors.
      for (const key of Object.keys(closes)) delete closes[key]
      errors = 0
      errorSamples.length = 0
      closingAll = false
      return { id: command.id, ok: true }
    }
  }
}

process.on("message", (message: ClientCommand) => {
  handle(message).then(
    (reply) => process.send?.(reply),
    (error: unknown) => process.send?.({ id: message.id, ok: false, error: String(error) })
  )
})
process.on("disconnect", () => process.exit(0))
