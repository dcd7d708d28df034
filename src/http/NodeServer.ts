import { createServer, IncomingMessage, type Server, type ServerResponse } from "node:http"

/**
 * A request whose body is abandoned rather than destroyed. The platform stops reading a body over
 * its size limit by destroying the request, and destroying an unfinished request destroys the
 * socket, so the 413 the edge builds would never reach the client (it sees a reset instead).
 */
class AbandonableRequest extends IncomingMessage {
  abandoned = false

  override destroy(error?: Error): this {
    if (this.complete || this.socket.destroyed) return super.destroy(error)
    // Stop reading; the connection is closed once the answer has been written.
    this.abandoned = true
    this.pause()
    return this
  }
}

/** The HTTP server of a node: answers requests whose bodies were cut short, then hangs up. */
export const createNodeServer = (): Server => {
  const server = createServer({ IncomingMessage: AbandonableRequest })
  server.on("request", (request: AbandonableRequest, response: ServerResponse) => {
    response.once("finish", () => {
      if (request.abandoned) request.socket.destroySoon()
    })
  })
  return server
}
