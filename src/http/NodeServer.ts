import { IncomingMessage, Server, type ServerResponse } from "node:http"
import type { Duplex } from "node:stream"
import { BadRequest, Unavailable } from "../domain/ApiError.js"
import { answerForError, type ErrorAnswer } from "./ErrorAnswer.js"
import { envelopeBody } from "./ErrorEnvelope.js"
import { requestIdFrom } from "./RequestId.js"

/**
 * A request whose body is abandoned rather than destroyed: destroying an unfinished request destroys its
 * socket, and the client would see a reset instead of the edge's 413.
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

/** Status and code for a request Node's parser refused, as Node itself would answer it. */
const clientErrorAnswer = (code: string | undefined) =>
  code === "HPE_HEADER_OVERFLOW"
    ? { status: 431, reason: "Request Header Fields Too Large", code: "headers_too_large", message: "request headers too large" }
    : code === "ERR_HTTP_REQUEST_TIMEOUT"
    ? { status: 408, reason: "Request Timeout", code: "request_timeout", message: "the request did not arrive in time" }
    : { status: 400, reason: "Bad Request", code: "bad_request", message: "the request could not be parsed" }

/** Told of each request the server answers itself, before any route: for the request metrics. */
type UnroutedAnswer = (route: "unparsed" | "stopping", method: string, status: number) => void

/**
 * A request the HTTP parser refused gets the error envelope rather than Node's bare status line; then
 * the connection closes, as the rest of its bytes cannot be trusted.
 */
const answerClientError = (answered: UnroutedAnswer) => (error: Error & { readonly code?: string }, socket: Duplex) => {
  if (error.code === "ECONNRESET" || !socket.writable) return socket.destroy()
  const requestId = crypto.randomUUID()
  const answer = clientErrorAnswer(error.code)
  const body = JSON.stringify(envelopeBody(answer.code, answer.message, null, requestId))
  // The method is among what could not be trusted.
  answered("unparsed", "unknown", answer.status)
  socket.end(
    `HTTP/1.1 ${answer.status} ${answer.reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n` +
      `x-request-id: ${requestId}\r\nconnection: close\r\n\r\n${body}`
  )
}

/** How soon a client refused by a stopping node should try again (on another node). */
const STOPPING_RETRY_AFTER_MS = 1000

/** A JSON answer the server writes itself, outside the router. */
export interface Answer {
  readonly status: number
  readonly headers?: Readonly<Record<string, string>>
  readonly body: unknown
}

/** Writes an answer outside the router; with `closeConnection`, the connection ends after it. */
export const writeAnswer = (response: ServerResponse, requestId: string, answer: Answer, closeConnection: boolean) => {
  const text = JSON.stringify(answer.body)
  const headers: Record<string, string | number> = {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    "x-request-id": requestId
  }
  if (answer.headers !== undefined) Object.assign(headers, answer.headers)
  if (closeConnection) headers["connection"] = "close"
  if (!response.destroyed) {
    response.writeHead(answer.status, headers)
    response.end(text)
  }
}

/** Answers a request the server refuses before any route with the envelope, then closes the connection. */
const answerUnrouted = (request: AbandonableRequest, response: ServerResponse, answer: (requestId: string) => ErrorAnswer) => {
  const header = request.headers["x-request-id"]
  const requestId = requestIdFrom(Array.isArray(header) ? header[0] : header)
  writeAnswer(response, requestId, answer(requestId), true)
}

/**
 * Answers a request that arrives while the server stops: the platform detaches its handler before
 * closing the listener, and such a request would otherwise wait until the process exits.
 */
const answerStopping = (request: AbandonableRequest, response: ServerResponse, answered: UnroutedAnswer) => {
  answerUnrouted(request, response, (requestId) =>
    answerForError(
      new Unavailable({
        message: "this node is not serving requests now (it is stopping), retry",
        reason: "draining",
        retry_after_ms: STOPPING_RETRY_AFTER_MS
      }),
      requestId
    ))
  answered("stopping", request.method ?? "unknown", 503)
}

/**
 * HTTP/1.1 requires a Host header (RFC 9112 §3.2). Node refuses a request without one with a bare
 * 400 of its own, so the server asks Node not to and answers it here, with the envelope.
 */
const lacksHost = (request: AbandonableRequest) => request.httpVersion === "1.1" && request.headers.host === undefined

const answerWithoutHost = (request: AbandonableRequest, response: ServerResponse, answered: UnroutedAnswer) => {
  answerUnrouted(request, response, (requestId) =>
    answerForError(new BadRequest({ message: "the request has no Host header" }), requestId))
  // The body, if any, is left unread: the connection cannot carry another request.
  request.abandoned = true
  answered("unparsed", request.method ?? "unknown", 400)
}

/** Answers a request itself and returns true, or returns false to leave it to the router. */
export type RequestClaim = (request: AbandonableRequest, response: ServerResponse) => boolean

/**
 * The HTTP server of a node. A request is first offered to `claim` (the lean append route), then
 * to the platform's router; an upgrade is first offered to `claimUpgrade` (the socket endpoints). Requests whose bodies were cut short are answered, then hung up on.
 */
class NodeServer extends Server<typeof AbandonableRequest> {
  constructor(
    private readonly claim: RequestClaim,
    private readonly claimUpgrade: UpgradeClaim,
    private readonly answered: UnroutedAnswer
  ) {
    super({ IncomingMessage: AbandonableRequest, requireHostHeader: false })
    this.on("clientError", answerClientError(answered))
  }

  override emit(event: string, ...args: Array<unknown>): boolean {
    if (event === "upgrade" && this.claimUpgrade(args[0] as IncomingMessage, args[1] as Duplex, args[2] as Buffer)) return true
    if (event === "request") {
      const response = args[1] as ServerResponse
      const request = args[0] as AbandonableRequest
      response.once("finish", () => {
        if (request.abandoned) request.socket.destroySoon()
      })
      if (lacksHost(request)) {
        answerWithoutHost(request, response, this.answered)
        return true
      }
      if (this.claim(request, response)) return true
      if (this.listenerCount("request") === 0) {
        answerStopping(request, response, this.answered)
        return true
      }
    }
    return super.emit(event, ...args)
  }
}

/** Called for each upgrade request before the platform sees it; true when it took the request. */
export type UpgradeClaim = (request: IncomingMessage, socket: Duplex, head: Buffer) => boolean

export const createNodeServer = (claim: RequestClaim, claimUpgrade: UpgradeClaim, answered: UnroutedAnswer): Server =>
  new NodeServer(claim, claimUpgrade, answered)
