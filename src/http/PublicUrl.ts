import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Option } from "effect"
import { type Cidr, inRanges } from "../config/NetworkList.js"

/** The client socket a `streamUrl` points at (client-api.md "Sockets", Phoenix-channel binding). */
const CLIENT_SOCKET_PATH = "/socket/chat/websocket"

/**
 * Whether the client reached us over HTTPS: the node itself speaks plain HTTP, so only a trusted
 * proxy's `X-Forwarded-Proto` can say so.
 */
const overHttps = (request: HttpServerRequest.HttpServerRequest, trustedProxies: ReadonlyArray<Cidr>) =>
  inRanges(Option.getOrElse(request.remoteAddress, () => ""), trustedProxies) &&
  (request.headers["x-forwarded-proto"] ?? "").split(",")[0]?.trim().toLowerCase() === "https"

/** The scheme-less origin a client used: the host and port the request named, and whether it was HTTPS. */
const originOf = (request: HttpServerRequest.HttpServerRequest, trustedProxies: ReadonlyArray<Cidr>, fallbackHost: string) => ({
  secure: overHttps(request, trustedProxies),
  host: request.headers["host"] ?? fallbackHost
})

/**
 * The `streamUrl` of a conversation: the client socket on the host the request named (`wss` for HTTPS),
 * its query percent-encoded so token, conversation and watermark read back as sent.
 */
export const streamUrl = (
  request: HttpServerRequest.HttpServerRequest,
  trustedProxies: ReadonlyArray<Cidr>,
  fallbackHost: string,
  query: { readonly token: string; readonly conversationId: string; readonly watermark?: string | undefined }
): string => {
  const { host, secure } = originOf(request, trustedProxies, fallbackHost)
  const params = [`token=${encodeURIComponent(query.token)}`, `conversation_id=${encodeURIComponent(query.conversationId)}`]
  if (query.watermark !== undefined) params.push(`watermark=${encodeURIComponent(query.watermark)}`)
  return `${secure ? "wss" : "ws"}://${host}${CLIENT_SOCKET_PATH}?${params.join("&")}`
}

/** An HTTP URL of this API as the client reached it (`https` behind a trusted HTTPS proxy), for `path`. */
export const httpUrl = (
  request: HttpServerRequest.HttpServerRequest,
  trustedProxies: ReadonlyArray<Cidr>,
  fallbackHost: string,
  path: string
): string => {
  const { host, secure } = originOf(request, trustedProxies, fallbackHost)
  return `${secure ? "https" : "http"}://${host}${path}`
}
