import { Effect } from "effect"
import { createServer, type IncomingHttpHeaders } from "node:http"
import type { AddressInfo } from "node:net"

/** One request a receiver got. */
export interface Received {
  readonly headers: IncomingHttpHeaders
  readonly body: Buffer
}

/** A receiver's answer: the status, and a JSON body (`{}` unless given). */
export interface Answer {
  readonly status: number
  readonly body?: unknown
}

/**
 * A webhook receiver on 127.0.0.1 for the scope: it records every request and answers each with
 * `answer(request, earlier)`, `earlier` being how many requests of the same delivery id came before.
 */
export const webhookReceiver = (answer: (request: Received, earlier: number) => Answer) =>
  Effect.acquireRelease(
    Effect.async<{ readonly url: string; readonly received: Array<Received>; readonly close: () => void }>((resume) => {
      const received: Array<Received> = []
      const seen = new Map<string, number>()
      const server = createServer((request, response) => {
        const chunks: Array<Buffer> = []
        request.on("data", (chunk: Buffer) => chunks.push(chunk))
        request.on("end", () => {
          const got = { headers: request.headers, body: Buffer.concat(chunks) }
          received.push(got)
          const id = String(request.headers["x-chat-delivery-id"])
          const earlier = seen.get(id) ?? 0
          seen.set(id, earlier + 1)
          const { body, status } = answer(got, earlier)
          response.writeHead(status, { "content-type": "application/json" })
          response.end(JSON.stringify(body ?? {}))
        })
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
          received,
          close: () => server.close()
        })))
    }),
    (receiver) => Effect.sync(receiver.close)
  )
