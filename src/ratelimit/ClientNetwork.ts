import ipaddr from "ipaddr.js"
import { parseAddress } from "../config/NetworkList.js"

/**
 * The key a client address is counted under: an IPv4 address itself (an IPv4-mapped one too) and an
 * IPv6 address by its /64, since one subscriber commonly holds a whole /64; other text as given.
 */
export const clientNetwork = (address: string): string => {
  const parsed = parseAddress(address)
  if (parsed === undefined) return address
  if (parsed.kind() === "ipv4") return parsed.toString()
  const [a, b, c, d] = (parsed as ipaddr.IPv6).parts
  return `${new ipaddr.IPv6([a!, b!, c!, d!, 0, 0, 0, 0]).toString()}/64`
}
