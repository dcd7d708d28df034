import { Effect } from "effect"
import { request as httpRequest } from "node:http"

/** An answer read with node:http, which (unlike fetch) lets a test control framing and body. */
export interface RawReply {
  readonly status: number
  readonly headers: Record<string, string | Array<string> | undefined>
  readonly text: string
}

/**
 * Sends `chunks` as the body. Without a `content-length` header node sends them chunked. The
 * answer is taken as soon as it arrives: a server may answer (and stop reading) before the body
 * is complete, so errors writing the rest of the body are expected and ignored.
 */
export const rawRequest = (
  baseUrl: string,
  options: {
    readonly method: string
    readonly path: string
    readonly headers?: Record<string, string>
    readonly chunks?: ReadonlyArray<Uint8Array | string>
  }
) =>
  Effect.async<RawReply, Error>((resume) => {
    const req = httpRequest(`${baseUrl}${options.path}`, { method: options.method, headers: options.headers ?? {} })
    let answered = false
    req.on("response", (response) => {
      const parts: Array<Buffer> = []
      response.on("data", (part: Buffer) => parts.push(part))
      response.on("end", () => {
        answered = true
        resume(Effect.succeed({
          status: response.statusCode ?? 0,
          headers: response.headers,
          text: Buffer.concat(parts).toString("utf8")
        }))
      })
    })
    req.on("error", (error) => {
      if (!answered) resume(Effect.fail(error))
    })
    const write = async () => {
      for (const chunk of options.chunks ?? []) {
        if (req.destroyed) return
        if (!req.write(chunk)) await new Promise((resolve) => req.once("drain", resolve))
      }
      req.end()
    }
    void write()
    return Effect.sync(() => req.destroy())
  })

/**
 * Opens a request whose body never ends, so the server holds a live connection for it. Closing the
 * scope destroys it.
 */
export const holdOpenRequest = (baseUrl: string, path: string, headers: Record<string, string> = {}) =>
  Effect.acquireRelease(
    Effect.async<ReturnType<typeof httpRequest>>((resume) => {
      const req = httpRequest(`${baseUrl}${path}`, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json", "transfer-encoding": "chunked" }
      })
      // The server may drop the connection while stopping: that is what the caller looks at.
      req.on("error", () => undefined)
      req.write("{", () => resume(Effect.succeed(req)))
    }),
    (req) => Effect.sync(() => req.destroy())
  )
