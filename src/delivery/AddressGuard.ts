import { Data, Effect } from "effect"
import ipaddr from "ipaddr.js"
import { AppConfig } from "../config/AppConfig.js"
import { type Cidr, inRanges, parseCidr } from "../config/NetworkList.js"
import { HostResolver } from "./HostResolver.js"

/** Why a webhook target was refused. */
class AddressRejected extends Data.TaggedError("AddressRejected")<{ readonly reason: string }> {}

const IPV4_COMPATIBLE = ipaddr.IPv6.parseCIDR("::/96")

/**
 * True for a public unicast address: only ipaddr.js's `unicast` range, minus the deprecated `::/96`
 * it counts as unicast; IPv4-mapped IPv6 is judged as its IPv4 address (api-notes.md).
 */
export const isPublicAddress = (text: string): boolean => {
  if (!ipaddr.isValid(text)) return false
  let address = ipaddr.parse(text)
  if (address.kind() === "ipv6") {
    const ipv6 = address as ipaddr.IPv6
    if (ipv6.match(IPV4_COMPATIBLE)) return false
    if (ipv6.isIPv4MappedAddress()) address = ipv6.toIPv4Address()
  }
  return address.range() === "unicast"
}

interface AllowList {
  readonly hosts: ReadonlyArray<string>
  readonly suffixes: ReadonlyArray<string>
  readonly ranges: ReadonlyArray<Cidr>
}

const parseAllowList = (entries: ReadonlyArray<string>): AllowList => {
  const hosts: Array<string> = []
  const suffixes: Array<string> = []
  const ranges: Array<Cidr> = []
  for (const entry of entries) {
    const cidr = parseCidr(entry)
    if (cidr !== undefined) ranges.push(cidr)
    else if (entry.startsWith("*.")) suffixes.push(entry.slice(1))
    else hosts.push(entry)
  }
  return { hosts, suffixes, ranges }
}

/**
 * The host as allow entries and the localhost rule compare it: IPv6 without brackets, and without
 * the trailing dot of a fully qualified name (`localhost.` is `localhost`).
 */
const normaliseHost = (hostname: string) => {
  const host = hostname.toLowerCase()
  if (host.startsWith("[") && host.endsWith("]")) return host.slice(1, -1)
  return host.endsWith(".") ? host.slice(0, -1) : host
}

/**
 * Decides whether an outbound URL may be called: at save time and before every request. Operators
 * may allow chosen hosts (`WEBHOOK_ALLOWED_HOSTS`: exact host, `*.` wildcard, IP or CIDR).
 */
export class AddressGuard extends Effect.Service<AddressGuard>()("parley/AddressGuard", {
  effect: Effect.gen(function*() {
    const config = yield* AppConfig
    const resolver = yield* HostResolver
    const allow = parseAllowList(config.webhookAllowedHosts)

    const hostAllowed = (host: string) =>
      allow.hosts.includes(host) || allow.suffixes.some((suffix) => host.endsWith(suffix) && host.length > suffix.length)

    const addressAllowed = (address: string) => isPublicAddress(address) || inRanges(address, allow.ranges)

    /**
     * The URL's shape and literal host, checked without DNS: plain code, as it runs before every
     * webhook request (ADR 0030, "Cost per delivery").
     */
    const parse = (raw: string): AddressRejected | { readonly url: URL; readonly host: string } => {
      let url: URL
      try {
        url = new URL(raw)
      } catch {
        return new AddressRejected({ reason: "is not a valid URL" })
      }
      if (url.protocol !== "http:" && url.protocol !== "https:") return new AddressRejected({ reason: "must use http or https" })
      if (url.username !== "" || url.password !== "") return new AddressRejected({ reason: "must not carry credentials" })
      return { url, host: normaliseHost(url.hostname) }
    }

    /**
     * Resolves the host and returns the addresses a request may be pinned to. A host that does not
     * resolve yields no addresses (accepted at save time, failed at delivery until it resolves).
     */
    const check = (raw: string): Effect.Effect<{ readonly url: URL; readonly addresses: ReadonlyArray<string> }, AddressRejected> => {
      const parsed = parse(raw)
      if (parsed instanceof AddressRejected) return Effect.fail(parsed)
      const { host, url } = parsed
      if (ipaddr.isValid(host)) {
        return addressAllowed(host)
          ? Effect.succeed({ url, addresses: [host] })
          : Effect.fail(new AddressRejected({ reason: "points to a non-public address" }))
      }
      if ((host === "localhost" || host.endsWith(".localhost")) && !hostAllowed(host)) {
        return Effect.fail(new AddressRejected({ reason: "points to a non-public address" }))
      }
      return Effect.flatMap(resolver.resolve(host), (resolved) =>
        !hostAllowed(host) && resolved.some((address) => !addressAllowed(address))
          ? Effect.fail(new AddressRejected({ reason: "resolves to a non-public address" }))
          : Effect.succeed({ url, addresses: resolved }))
    }

    return { check } as const
  }),
  dependencies: [HostResolver.Default]
}) {}
