import { IncomingMessage, Server, type ServerResponse } from "node:http"

/**
 * A request whose body is abandoned rather than destroyed. The platform stops reading a body over
 * its size limit by destroying the request, and destroying an unfinished request destroys the
 * socket, so the 413 the edge builds would never reach the client (it sees a reset instead).
 */
export class AbandonableRequest extends IncomingMessage {
  abandoned = false

  override destroy(error?: Error): this {
    if (this.complete || this.socket.destroyed) return super.destroy(error)
    // Stop reading; the connection is closed once the answer has been written.
    this.abandoned = true
    this.pause()
    return this
  }
}

/** Answers a request itself and returns true, or returns false to leave it to the router. */
export type RequestClaim = (request: AbandonableRequest, response: ServerResponse) => boolean

/**
 * The HTTP server of a node. A request is first offered to `claim` (the lean append route), then
 * to the platform's router. Requests whose bodies were cut short are answered, then hung up on.
 */
class NodeServer extends Server<typeof AbandonableRequest> {
  constructor(private readonly claim: RequestClaim) {
    super({ IncomingMessage: AbandonableRequest })
  }

  override emit(event: string, ...args: Array<unknown>): boolean {
    if (event === "request") {
      const response = args[1] as ServerResponse
      const request = args[0] as AbandonableRequest
      response.once("finish", () => {
        if (request.abandoned) request.socket.destroySoon()
      })
      if (this.claim(request, response)) return true
    }
    return super.emit(event, ...args)
  }
}

export const createNodeServer = (claim: RequestClaim = () => false): Server => new NodeServer(claim)
