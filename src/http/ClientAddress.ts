import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import { Option } from "effect"
import { type Cidr, inRanges } from "../config/NetworkList.js"

/**
 * The client's address: the peer, unless the peer is a trusted proxy, in which case the
 * `X-Forwarded-For` chain is walked from the right past every trusted hop.
 */
export const clientAddress = (
  request: HttpServerRequest.HttpServerRequest,
  trustedProxies: ReadonlyArray<Cidr>
): string => {
  const peer = Option.getOrElse(request.remoteAddress, () => "")
  if (trustedProxies.length === 0 || !inRanges(peer, trustedProxies)) return peer
  const forwarded = (request.headers["x-forwarded-for"] ?? "").split(",").map((s) => s.trim()).filter((s) => s !== "")
  for (let i = forwarded.length - 1; i >= 0; i--) {
    const hop = forwarded[i]!
    if (!inRanges(hop, trustedProxies)) return hop
  }
  return forwarded[0] ?? peer
}
