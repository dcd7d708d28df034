import ipaddr from "ipaddr.js"

/** A parsed IP range; a bare address is a range of one. */
export type Cidr = readonly [ipaddr.IPv4 | ipaddr.IPv6, number]

/**
 * Whether `text` is an address in standard form. ipaddr.js also reads shorthand, hex and octal IPv4
 * (`127.1`, `010.0.0.1` as 8.0.0.1), which an operator would not mean.
 */
const isStandardAddress = (text: string) =>
  text.includes(":") ? ipaddr.IPv6.isValid(text) : ipaddr.IPv4.isValidFourPartDecimal(text)

/** Parses `1.2.3.4`, `10.0.0.0/8`, `::1/128`; undefined when malformed. */
export const parseCidr = (text: string): Cidr | undefined => {
  const trimmed = text.trim()
  const [address, bits, ...rest] = trimmed.split("/")
  if (!isStandardAddress(address!) || rest.length > 0 || (bits !== undefined && !/^\d{1,3}$/.test(bits))) return undefined
  try {
    if (trimmed.includes("/")) {
      const [address, bits] = ipaddr.parseCIDR(trimmed)
      return [address, bits]
    }
    const address = ipaddr.parse(trimmed)
    return [address, address.kind() === "ipv4" ? 32 : 128]
  } catch {
    return undefined
  }
}

/** Normalises IPv4-mapped IPv6 (`::ffff:1.2.3.4`) to IPv4 so ranges of either family match. */
export const parseAddress = (text: string): ipaddr.IPv4 | ipaddr.IPv6 | undefined => {
  if (!ipaddr.isValid(text)) return undefined
  const address = ipaddr.parse(text)
  return address.kind() === "ipv6" && (address as ipaddr.IPv6).isIPv4MappedAddress()
    ? (address as ipaddr.IPv6).toIPv4Address()
    : address
}

/** True when the address lies in any of the ranges. */
export const inRanges = (address: string, ranges: ReadonlyArray<Cidr>): boolean => {
  const parsed = parseAddress(address)
  if (parsed === undefined) return false
  return ranges.some(([range, bits]) => {
    const candidate = range.kind() === "ipv4" && parsed.kind() === "ipv6" ? undefined : parsed
    if (candidate === undefined || candidate.kind() !== range.kind()) return false
    return candidate.match([range, bits] as [typeof range, number])
  })
}

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/i

/**
 * A DNS host name by its syntax (not resolved): labels of letters, digits and inner hyphens, at most
 * 253 characters. All-digit dotted names are IPv4 addresses or nothing (`256.1.1.1` is neither).
 */
export const isHostName = (text: string): boolean =>
  text.length > 0 && text.length <= 253 && !/^[\d.]+$/.test(text) && text.split(".").every((label) => LABEL.test(label))

/**
 * An address to listen on or be reached at: an IP address in its standard form (as in the IP lists:
 * `HOST=5000` would be 0.0.19.136) or a host name.
 */
export const isHost = (text: string): boolean => isStandardAddress(text) || isHostName(text)

/**
 * Whether `text` is an IP address that names no host in particular (0.0.0.0/8 or `::`, also in
 * shorthand such as `0` or `5000`, or IPv4-mapped): one to listen on, never one to dial.
 */
export const isUnspecifiedAddress = (text: string): boolean => parseAddress(text)?.range() === "unspecified"

