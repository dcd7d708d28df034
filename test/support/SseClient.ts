import { Effect, type Scope } from "effect"
import { request as httpRequest, type IncomingHttpHeaders, type IncomingMessage } from "node:http"
import { TestNode } from "./TestNode.js"
import { eventually } from "./Eventually.js"

/** One event as a client parses it. */
export interface SseEvent {
  readonly event: string
  readonly id: string | undefined
  readonly data: any
}

/** An open (or refused) event stream: what arrived so far, live. */
export interface SseConnection {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  /** The envelope of a refused stream. */
  readonly body: () => any
  readonly events: Array<SseEvent>
  /** The `retry:` fields, in order. */
  readonly retries: Array<string>
  /** The lines before the first event, as written. */
  readonly raw: () => string
  readonly ended: () => boolean
  /** Stops reading (the server's writes back up) or reads again. */
  readonly pause: () => void
  readonly resume: () => void
  readonly response: IncomingMessage
}

/** Opens `path` of the test node as an event stream; closed with the scope. */
export const openStream = (path: string, headers: Record<string, string> = {}): Effect.Effect<SseConnection, never, Scope.Scope | TestNode> =>
  Effect.flatMap(TestNode, ({ baseUrl }) =>
    Effect.acquireRelease(
      Effect.async<SseConnection>((resume) => {
        const req = httpRequest(`${baseUrl}${path}`, { headers: { accept: "text/event-stream", ...headers } }, (response) => {
          const events: Array<SseEvent> = []
          const retries: Array<string> = []
          let text = ""
          let all = ""
          let ended = false
          response.setEncoding("utf8")
          response.on("data", (chunk: string) => {
            all += chunk
            text += chunk
            let cut = text.indexOf("\n\n")
            while (cut >= 0) {
              const block = text.slice(0, cut)
              text = text.slice(cut + 2)
              cut = text.indexOf("\n\n")
              let event = "message"
              let id: string | undefined
              let data: string | undefined
              for (const line of block.split("\n")) {
                const colon = line.indexOf(":")
                const field = line.slice(0, colon)
                const value = line.slice(colon + 1).replace(/^ /, "")
                if (field === "event") event = value
                else if (field === "id") id = value
                else if (field === "data") data = value
                else if (field === "retry") retries.push(value)
              }
              if (data !== undefined) events.push({ event, id, data: safeJson(data) })
            }
          })
          const done = () => {
            ended = true
          }
          response.on("end", done)
          response.on("close", done)
          response.on("error", done)
          resume(Effect.succeed({
            status: response.statusCode ?? 0,
            headers: response.headers,
            body: () => safeJson(all),
            events,
            retries,
            raw: () => all,
            ended: () => ended,
            pause: () => response.pause(),
            resume: () => response.resume(),
            response
          }))
        })
        req.on("error", () => undefined)
        req.end()
      }),
      (connection) => Effect.sync(() => connection.response.destroy())
    ))

const safeJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

/** Waits until the stream has `count` events matching `matches`; returns them. */
export const eventsOf = (connection: SseConnection, matches: (event: SseEvent) => boolean, count = 1, what = "events") =>
  eventually(Effect.sync(() => connection.events.filter(matches)), (found) => found.length >= count, { what })

/** Waits until the server ended the stream. */
export const endOf = (connection: SseConnection) => eventually(Effect.sync(() => connection.ended()), (ended) => ended, { what: "end of stream" })
