import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import { Context, Effect, type Either, Layer, Runtime } from "effect"
import type { IncomingMessage } from "node:http"
import type { Duplex } from "node:stream"
import { type WebSocket, WebSocketServer } from "ws"
import type { ClientPrincipal } from "../auth/ClientAccess.js"
import { ClientTokens } from "../auth/ClientTokens.js"
import { type BadRequest, Unauthorized, type UnsupportedProtocol, UpgradeRequired, type WireError } from "../domain/ApiError.js"
import { answerForError } from "../http/ErrorAnswer.js"
import type { UpgradeClaim } from "../http/NodeServer.js"
import { requestIdFrom } from "../http/RequestId.js"
import type { RouteSpec } from "../http/RouteTable.js"
import { type Ending, LiveConnections, type LiveConnection } from "./LiveConnections.js"
import { RealtimeMetrics } from "./RealtimeMetrics.js"
import { makeSocketLink, SOCKET_LIMITS, type SocketLink } from "./SocketLink.js"

/** An accepted socket as a binding serves it. */
export interface ClientSocket {
  /** The principal of the token the socket connected with (an in-band refresh changes `connection.claims`). */
  readonly principal: ClientPrincipal
  readonly connection: LiveConnection
  readonly link: SocketLink
  /** The query string of the upgrade request. */
  readonly query: URLSearchParams
  /** `Host` as the client sent it, for URLs it is given. */
  readonly host: string
}

/** One socket endpoint of client-api.md "Sockets". */
export interface SocketBinding {
  /** Its name, which is also the key of its path in `SOCKET_PATHS`. */
  readonly name: keyof typeof SOCKET_PATHS
  /**
   * The subprotocol taken among those offered ("" for none); fails when the binding speaks none of them,
   * or (400 `bad_request`) when the query names a protocol version it does not speak.
   */
  readonly protocol: (offered: ReadonlyArray<string>, query: URLSearchParams) => Either.Either<string, UnsupportedProtocol | BadRequest>
  /** Serves the socket until it closes (it is interrupted then). */
  readonly serve: (socket: ClientSocket) => Effect.Effect<void, never, never>
}

/** The bindings a node serves. */
export class SocketBindings extends Context.Tag("parley/SocketBindings")<SocketBindings, ReadonlyArray<SocketBinding>>() {}

/** Close code and reason for a server-side ending (documented in docs/api-notes.md "Realtime"). */
export const closeOf = (ending: Ending, joined: boolean): { readonly code: number; readonly reason: string } => {
  switch (ending._tag) {
    case "Revoked":
      return { code: 4401, reason: JSON.stringify({ reason: "token_revoked" }) }
    case "Expired":
      return { code: 4401, reason: JSON.stringify({ reason: "token_expired" }) }
    case "ChannelInactive":
      return { code: 4403, reason: JSON.stringify({ reason: "channel_inactive" }) }
    case "Idle":
      return { code: 4408, reason: JSON.stringify({ reason: "idle_timeout" }) }
    case "Draining":
      return joined
        ? { code: 1012, reason: JSON.stringify({ reason: "unavailable", retryAfterMs: ending.retryAfterMs }) }
        : { code: 1001, reason: "" }
  }
}

const STATUS_TEXT: Readonly<Record<number, string>> = {
  400: "Bad Request",
  401: "Unauthorized",
  403: "Forbidden",
  500: "Internal Server Error",
  503: "Service Unavailable"
}

/** Answers an upgrade the node refuses with the error envelope, then hangs up. */
const refuse = (socket: Duplex, request: IncomingMessage, error: WireError) => {
  if (!socket.writable) return socket.destroy()
  const header = request.headers["x-request-id"]
  const requestId = requestIdFrom(Array.isArray(header) ? header[0] : header)
  const answer = answerForError(error, requestId)
  const body = JSON.stringify(answer.body)
  const headers = Object.entries(answer.headers).map(([name, value]) => `${name}: ${value}\r\n`).join("")
  socket.end(
    `HTTP/1.1 ${answer.status} ${STATUS_TEXT[answer.status] ?? "Error"}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nx-request-id: ${requestId}\r\n${headers}connection: close\r\n\r\n${body}`
  )
}

/** The token of an upgrade: `Authorization: Bearer` (wins) or `?token=`. */
const tokenOf = (request: IncomingMessage, query: URLSearchParams) => {
  const bearer = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? "")
  return bearer !== null ? bearer[1]! : query.get("token") ?? ""
}

/**
 * The socket endpoints: an upgrade to one of their paths is refused while the node drains (503), without
 * an acceptable subprotocol (400) or a valid token (401/403), and otherwise handed to its binding.
 */
export class SocketEndpoints extends Effect.Service<SocketEndpoints>()("parley/SocketEndpoints", {
  scoped: Effect.gen(function*() {
    const bindings = yield* SocketBindings
    const tokens = yield* ClientTokens
    const live = yield* LiveConnections
    const runtime = yield* Effect.runtime<RealtimeMetrics>()
    const run = Runtime.runFork(runtime)
    const scope = yield* Effect.scope
    const byPath = new Map<string, SocketBinding>(bindings.map((binding) => [SOCKET_PATHS[binding.name], binding]))
    // The subprotocol each accepted request negotiated, read back while `ws` completes its upgrade.
    const negotiated = new WeakMap<IncomingMessage, string>()
    const server = new WebSocketServer({
      noServer: true,
      maxPayload: SOCKET_LIMITS.hardCapBytes,
      perMessageDeflate: false,
      handleProtocols: (_offered, request) => negotiated.get(request) || false
    })
    yield* Effect.addFinalizer(() => Effect.sync(() => server.close()))

    const session = (binding: SocketBinding, principal: ClientPrincipal, query: URLSearchParams, host: string) =>
    (ws: WebSocket) =>
      Effect.scoped(Effect.gen(function*() {
        const link = yield* makeSocketLink(ws, binding.name)
        const connection: LiveConnection = {
          binding: binding.name,
          claims: principal.claims,
          joined: false,
          lastInboundAt: link.lastInboundAt,
          end: (ending) => {
            const { code, reason } = closeOf(ending, connection.joined)
            link.close(code, reason)
          }
        }
        yield* live.register(connection)
        yield* Effect.raceFirst(binding.serve({ principal, connection, link, query, host }), link.closed)
      }))

    const accept = (binding: SocketBinding, request: IncomingMessage, socket: Duplex, head: Buffer, query: URLSearchParams) =>
      Effect.gen(function*() {
        yield* live.admit
        const offered = (request.headers["sec-websocket-protocol"] ?? "").split(",").map((p) => p.trim()).filter((p) => p !== "")
        const protocol = yield* binding.protocol(offered, query)
        const token = tokenOf(request, query)
        if (token === "") return yield* new Unauthorized({ message: "missing token: send ?token= or Authorization: Bearer" })
        const principal = yield* tokens.authenticate(token)
        return { principal, protocol }
      }).pipe(
        Effect.matchEffect({
          onFailure: (error) => Effect.sync(() => refuse(socket, request, error)),
          onSuccess: ({ principal, protocol }) =>
            Effect.sync(() => {
              negotiated.set(request, protocol)
              server.handleUpgrade(request, socket, head, (ws) => {
                run(session(binding, principal, query, request.headers.host ?? "")(ws).pipe(Effect.forkIn(scope)))
              })
            })
        })
      )

    const claim: UpgradeClaim = (request, socket, head) => {
      const url = new URL(request.url ?? "/", "http://node")
      const binding = byPath.get(url.pathname)
      if (binding === undefined) return false
      run(accept(binding, request, socket, head, url.searchParams).pipe(
        Effect.catchAllCause((cause) => Effect.sync(() => socket.destroy()).pipe(Effect.zipRight(Effect.logError("socket upgrade failed", cause))))
      ))
      return true
    }

    return { claim } as const
  })
}) {}

/** Where each binding listens (client-api.md "Sockets"). */
export const SOCKET_PATHS = {
  phoenix: "/socket/chat/websocket",
  native: "/socket/chat/v1",
  legacy: "/socket/websocket"
} as const

/** The socket paths, for the route table: a plain HTTP request is answered 426 `upgrade_required`. */
export const socketRoutes: ReadonlyArray<RouteSpec> = Object.values(SOCKET_PATHS).map((path) => ({ method: "GET", path }))

const upgradeRequired = Effect.fail(new UpgradeRequired({ message: "this endpoint only takes WebSocket upgrades" }))

export const SocketRoutes = Layer.mergeAll(
  HttpLayerRouter.add("GET", SOCKET_PATHS.phoenix, upgradeRequired),
  HttpLayerRouter.add("GET", SOCKET_PATHS.native, upgradeRequired),
  HttpLayerRouter.add("GET", SOCKET_PATHS.legacy, upgradeRequired)
)
