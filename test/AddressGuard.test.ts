import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Layer } from "effect"
import { AppConfig } from "../src/config/AppConfig.js"
import { AddressGuard, isPublicAddress } from "../src/delivery/AddressGuard.js"
import { HostResolver } from "../src/delivery/HostResolver.js"

/** Names this test resolves; everything else does not resolve. No real DNS is consulted. */
const names: Record<string, ReadonlyArray<string>> = {
  "public.test": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
  "internal.test": ["10.0.0.5"],
  "mixed.test": ["93.184.216.34", "192.168.1.10"],
  "mapped.test": ["::ffff:127.0.0.1"],
  "hooks.internal": ["10.0.0.6"],
  "example.com": ["10.0.0.7"],
  "a.example.com": ["10.0.0.8"],
  "deep.a.example.com": ["10.0.0.9"],
  "in-range.test": ["10.1.9.9"],
  "localhost": ["127.0.0.1", "::1"]
}

const FixedResolver = Layer.succeed(
  HostResolver,
  HostResolver.make({ resolve: (host) => Effect.succeed(names[host] ?? []) })
)

const configWith = (allowedHosts: string) =>
  AppConfig.Default.pipe(
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["WEBHOOK_ALLOWED_HOSTS", allowedHosts]]))))
  )

/** The guard under `WEBHOOK_ALLOWED_HOSTS=allowedHosts`, resolving through the fixed table. */
const guardWith = (allowedHosts = "") =>
  AddressGuard.DefaultWithoutDependencies.pipe(Layer.provide([configWith(allowedHosts), FixedResolver]))

/** Whether the guard accepts the URL, as a plain boolean for table-driven checks. */
const accepts = (url: string) =>
  AddressGuard.pipe(
    Effect.flatMap((guard) => guard.check(url)),
    Effect.either,
    Effect.map(Either.isRight)
  )

const refused = {
  "private 10/8": ["10.0.0.1", "10.255.255.255"],
  "private 172.16/12": ["172.16.0.1", "172.31.255.254"],
  "private 192.168/16": ["192.168.0.1"],
  loopback: ["127.0.0.1", "127.8.8.8", "::1"],
  "link-local 169.254/16": ["169.254.169.254"],
  "CGNAT 100.64/10": ["100.64.0.1", "100.127.255.254"],
  documentation: ["192.0.2.10", "198.51.100.10", "203.0.113.10", "2001:db8::1"],
  multicast: ["224.0.0.1", "239.255.255.250", "ff02::1", "ff0e::1"],
  reserved: ["240.0.0.1", "0.0.0.0", "0.1.2.3", "255.255.255.255"],
  "benchmarking 198.18/15": ["198.18.0.1", "198.19.255.254"],
  "unique-local fc00::/7": ["fc00::1", "fd12:3456::1"],
  "link-local fe80::/10": ["fe80::1"],
  "site-local fec0::/10": ["fec0::1"],
  "IPv4-mapped private": ["::ffff:10.0.0.1", "::ffff:127.0.0.1"],
  "6to4, Teredo, NAT64": ["2002:c0a8:101::1", "2001:0:4136:e378::1", "64:ff9b::a00:1"],
  // As URLs write them: `[::127.0.0.1]` is `[::7f00:1]`.
  "IPv4-compatible (deprecated)": ["::7f00:1", "::808:808", "::a00:1"],
  unspecified: ["::"],
  "not an address": ["example.com", "10.0.0", ""]
} as const

const accepted = ["8.8.8.8", "1.1.1.1", "172.32.0.1", "100.128.0.1", "198.20.0.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]

describe("isPublicAddress", () => {
  for (const [range, addresses] of Object.entries(refused)) {
    it(`refuses ${range}`, () => {
      for (const address of addresses) expect(isPublicAddress(address), address).toBe(false)
    })
  }

  it("accepts public unicast, IPv4-mapped judged as the IPv4 it carries", () => {
    for (const address of accepted) expect(isPublicAddress(address), address).toBe(true)
  })
})

describe("AddressGuard.check", () => {
  it.effect("refuses URLs whose literal host is not public, in both families", () =>
    Effect.gen(function*() {
      for (const addresses of Object.values(refused)) {
        for (const address of addresses.filter((a) => a.includes(":") || /^\d+\.\d+\.\d+\.\d+$/.test(a))) {
          const host = address.includes(":") ? `[${address}]` : address
          expect(yield* accepts(`https://${host}/hook`), address).toBe(false)
        }
      }
    }).pipe(Effect.provide(guardWith())))

  it.effect("accepts public literal hosts and returns them as the addresses to use", () =>
    Effect.gen(function*() {
      const guard = yield* AddressGuard
      for (const address of accepted) {
        const host = address.includes(":") ? `[${address}]` : address
        expect(yield* accepts(`https://${host}:8443/hook?x=1`), address).toBe(true)
      }
      const checked = yield* guard.check("http://8.8.8.8/hook")
      expect(checked.addresses).toEqual(["8.8.8.8"])
      expect(checked.url.pathname).toBe("/hook")
    }).pipe(Effect.provide(guardWith())))

  it.effect("refuses other schemes, credentials in the URL and what is not a URL", () =>
    Effect.gen(function*() {
      for (
        const url of [
          "ftp://8.8.8.8/x",
          "file:///etc/passwd",
          "gopher://8.8.8.8/",
          "javascript:alert(1)",
          "ws://8.8.8.8/",
          "https://user:secret@8.8.8.8/hook",
          "https://user@8.8.8.8/hook",
          "not a url",
          "//8.8.8.8/hook"
        ]
      ) {
        expect(yield* accepts(url), url).toBe(false)
      }
      const error = yield* Effect.flip(Effect.flatMap(AddressGuard, (guard) => guard.check("https://u:p@8.8.8.8/")))
      expect(error._tag).toBe("AddressRejected")
      expect(error.reason).not.toContain("secret")
    }).pipe(Effect.provide(guardWith())))

  it.effect("judges a host name by every address it resolves to", () =>
    Effect.gen(function*() {
      const guard = yield* AddressGuard
      const checked = yield* guard.check("https://public.test/hook")
      expect(checked.addresses).toEqual(names["public.test"])
      expect(yield* accepts("https://internal.test/hook")).toBe(false)
      expect(yield* accepts("https://mixed.test/hook")).toBe(false)
      expect(yield* accepts("https://mapped.test/hook")).toBe(false)
    }).pipe(Effect.provide(guardWith())))

  it.effect("localhost is refused unless allowed, with or without a trailing dot", () =>
    Effect.gen(function*() {
      expect(yield* accepts("http://localhost:4000/hook")).toBe(false)
      expect(yield* accepts("http://localhost./hook")).toBe(false)
      expect(yield* accepts("http://api.localhost/hook")).toBe(false)
      const allowed = yield* accepts("http://localhost:4000/hook").pipe(Effect.provide(guardWith("localhost")))
      expect(allowed).toBe(true)
    }).pipe(Effect.provide(guardWith())))

  it.effect("WEBHOOK_ALLOWED_HOSTS: exact hosts, *. wildcards, IPs and CIDRs", () =>
    Effect.gen(function*() {
      const guard = yield* AddressGuard
      // Exact host, case-insensitive; its private addresses are allowed.
      const exact = yield* guard.check("https://HOOKS.internal/x")
      expect(exact.addresses).toEqual(["10.0.0.6"])
      expect(yield* accepts("https://other.internal/x")).toBe(true) // does not resolve: accepted at save
      expect(yield* accepts("https://internal.test/x")).toBe(false)
      // `*.example.com` matches names below it, not the name itself.
      expect(yield* accepts("https://a.example.com/x")).toBe(true)
      expect(yield* accepts("https://deep.a.example.com/x")).toBe(true)
      expect(yield* accepts("https://example.com/x")).toBe(false)
      // An IP entry allows exactly that address; a CIDR its whole range, literal or resolved.
      expect(yield* accepts("http://127.0.0.1:8080/x")).toBe(true)
      expect(yield* accepts("http://[::ffff:127.0.0.1]:8080/x")).toBe(true)
      expect(yield* accepts("http://127.0.0.2/x")).toBe(false)
      expect(yield* accepts("http://10.1.2.3/x")).toBe(true)
      expect(yield* accepts("http://10.2.0.1/x")).toBe(false)
      expect(yield* accepts("https://in-range.test/x")).toBe(true)
      expect(yield* accepts("http://[fd00::1]/x")).toBe(true)
      expect(yield* accepts("http://[fd01::1]/x")).toBe(false)
    }).pipe(Effect.provide(guardWith("hooks.internal, *.example.com,127.0.0.1,10.1.0.0/16,fd00::/16"))))

  it.effect("a host that does not resolve is accepted at save, with no addresses (real resolver)", () =>
    Effect.gen(function*() {
      const guard = yield* AddressGuard
      // `.invalid` never resolves (RFC 6761).
      const checked = yield* guard.check("https://nothing-here.invalid/hook")
      expect(checked.addresses).toEqual([])
    }).pipe(Effect.provide(AddressGuard.Default.pipe(Layer.provide(configWith(""))))))
})
