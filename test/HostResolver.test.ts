import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { createSocket } from "node:dgram"
import { hostResolver } from "../src/delivery/HostResolver.js"

/** A DNS server on 127.0.0.1 that takes every query and never answers; its `host:port`. */
const silentDnsServer = Effect.acquireRelease(
  Effect.async<{ readonly address: string; readonly close: () => void }>((resume) => {
    const socket = createSocket("udp4")
    socket.bind(0, "127.0.0.1", () =>
      resume(Effect.succeed({ address: `127.0.0.1:${socket.address().port}`, close: () => socket.close() })))
  }),
  (server) => Effect.sync(server.close)
)

/** A guard for a lookup that might never end, far above the resolver's bound: not a timing claim. */
const GUARD = "20 seconds"

describe("HostResolver", () => {
  it.scopedLive("a name whose DNS server never answers resolves to nothing, within the bound", () =>
    Effect.gen(function*() {
      const server = yield* silentDnsServer
      const resolver = yield* hostResolver({ servers: [server.address] })
      const addresses = yield* resolver.resolve("never-answered.parley-test.invalid").pipe(
        Effect.timeoutFail({ duration: GUARD, onTimeout: () => new Error("the lookup did not end") })
      )
      expect(addresses).toEqual([])
    }), 30_000)

  it.scopedLive("localhost and IP literals resolve as before, whatever DNS does", () =>
    Effect.gen(function*() {
      const server = yield* silentDnsServer
      const resolver = yield* hostResolver({ servers: [server.address] })
      expect(yield* resolver.resolve("localhost")).toContain("127.0.0.1")
      expect(yield* resolver.resolve("127.0.0.1")).toEqual(["127.0.0.1"])
    }), 30_000)
})
