import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer } from "effect"
import { connect } from "nats"
import { createServer, type Socket } from "node:net"
import type { AddressInfo } from "node:net"
import { AppConfig } from "../src/config/AppConfig.js"
import { AddressGuard } from "../src/delivery/AddressGuard.js"
import { HostResolver } from "../src/delivery/HostResolver.js"
import { MAX_NATS_CONNECTIONS, type NatsDelivery, NatsPublisher } from "../src/delivery/NatsPublisher.js"
import { DEFAULT_RETRY_POLICY, type JsonObject } from "../src/domain/Channel.js"
import { eventually } from "./support/Eventually.js"

// The NATS server of the test host (.ci/run starts it).
const NATS = "nats://127.0.0.1:4222"

const FixedResolver = Layer.succeed(
  HostResolver,
  HostResolver.make({
    resolve: (host) => Effect.succeed(host === "nats.internal.test" ? ["127.0.0.1"] : [])
  })
)

const publisherWith = (allowed: string) =>
  NatsPublisher.Default.pipe(
    Layer.provide(AddressGuard.DefaultWithoutDependencies),
    Layer.provide([
      AppConfig.Default.pipe(
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["WEBHOOK_ALLOWED_HOSTS", allowed]]))))
      ),
      FixedResolver
    ])
  )

const PAYLOAD = { id: "3f1c2b9e-0000-4000-8000-000000000001", type: "message", text: "héllo" }

const delivery = (config: JsonObject, deliveryId = crypto.randomUUID()): NatsDelivery => ({
  deliveryId,
  payload: PAYLOAD,
  config,
  retryPolicy: { ...DEFAULT_RETRY_POLICY, timeout_ms: 2000 }
})

/** A subscriber of its own on the test server, taking `count` messages of `subject`. */
const subscriber = (subject: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const nc = await connect({ servers: NATS, timeout: 5000 })
      const sub = nc.subscribe(subject)
      await nc.flush()
      return { nc, sub }
    }),
    ({ nc }) => Effect.promise(() => nc.close())
  )

const uniqueSubject = () => `parley.test.${crypto.randomUUID().replaceAll("-", "")}`

describe("NatsPublisher", () => {
  it.scopedLive("publishes the activity JSON on the subject, with the delivery id in its headers", () =>
    Effect.gen(function*() {
      const subject = uniqueSubject()
      const { sub } = yield* subscriber(subject)
      const d = delivery({ url: NATS, subject })
      const publisher = yield* NatsPublisher
      expect(yield* publisher.publish(d)).toEqual({ _tag: "Delivered", status: null, providerMessageId: null })
      // A second publish reuses the cached connection.
      expect((yield* publisher.publish(d))._tag).toBe("Delivered")
      const messages = yield* Effect.promise(async () => {
        const got = []
        for await (const message of sub) {
          got.push(message)
          if (got.length === 2) break
        }
        return got
      })
      for (const message of messages) {
        expect(message.subject).toBe(subject)
        expect(JSON.parse(new TextDecoder().decode(message.data))).toEqual(PAYLOAD)
        expect(message.headers?.get("x-chat-delivery-id")).toBe(d.deliveryId)
        expect(message.headers?.get("Nats-Msg-Id")).toBe(d.deliveryId)
        expect(message.headers?.get("x-chat-event")).toBe("activity.created")
      }
    }).pipe(Effect.provide(publisherWith("127.0.0.1"))))

  it.scopedLive("the server's address passes the guard: refused (permanent) unless allowed", () =>
    Effect.gen(function*() {
      const subject = uniqueSubject()
      const refused = yield* NatsPublisher.pipe(
        Effect.flatMap((p) => p.publish(delivery({ url: "nats://nats.internal.test:4222", subject }))),
        Effect.provide(publisherWith(""))
      )
      expect(refused).toEqual({ _tag: "Permanent", error: "address guard: url resolves to a non-public address", status: null })
      const direct = yield* NatsPublisher.pipe(
        Effect.flatMap((p) => p.publish(delivery({ url: NATS, subject }))),
        Effect.provide(publisherWith(""))
      )
      expect(direct._tag).toBe("Permanent")
      const allowed = yield* NatsPublisher.pipe(
        Effect.flatMap((p) => p.publish(delivery({ url: "nats://nats.internal.test:4222", subject }))),
        Effect.provide(publisherWith("nats.internal.test"))
      )
      expect(allowed._tag).toBe("Delivered")
    }))

  it.scopedLive("a server that is down, a silent one and an unresolvable host are retried; a bad subject is permanent", () =>
    Effect.gen(function*() {
      const publisher = yield* NatsPublisher
      // A port that was free a moment ago: nothing listens there.
      const downPort = yield* Effect.async<number>((resume) => {
        const server = createServer().listen(0, "127.0.0.1", () => {
          const { port } = server.address() as AddressInfo
          server.close(() => resume(Effect.succeed(port)))
        })
      })
      const down = yield* publisher.publish(delivery({ url: `nats://127.0.0.1:${downPort}`, subject: "a.b" }))
      expect(down._tag).toBe("Retryable")
      // Accepts the connection and never speaks NATS: the publish ends at its time limit.
      const silent = yield* Effect.acquireRelease(
        Effect.async<{ readonly port: number; readonly close: () => void }>((resume) => {
          const server = createServer(() => undefined).listen(0, "127.0.0.1", () =>
            resume(Effect.succeed({
              port: (server.address() as AddressInfo).port,
              close: () => server.close()
            })))
        }),
        ({ close }) => Effect.sync(close)
      )
      const mute = yield* publisher.publish(delivery({ url: `nats://127.0.0.1:${silent.port}`, subject: "a.b" }))
      expect(mute._tag).toBe("Retryable")
      expect(yield* publisher.publish(delivery({ url: "nats://nowhere.test:4222", subject: "a.b" }))).toEqual({
        _tag: "Retryable",
        error: "host did not resolve",
        status: null,
        retryAfterMs: null
      })
      expect((yield* publisher.publish(delivery({ url: NATS, subject: "a.*" })))._tag).toBe("Permanent")
      expect((yield* publisher.publish(delivery({ url: "http://127.0.0.1:4222", subject: "a.b" })))._tag).toBe("Permanent")
    }).pipe(Effect.provide(publisherWith("127.0.0.1"))))
})

/**
 * Just enough of a NATS server to count client connections: greets with INFO and answers every
 * PING (the client's connect check and each flush) with PONG.
 */
const fakeNats = Effect.acquireRelease(
  Effect.async<{ readonly port: number; readonly open: Set<Socket>; readonly opened: () => number; readonly close: () => void }>(
    (resume) => {
      const open = new Set<Socket>()
      let opened = 0
      const server = createServer((socket) => {
        opened += 1
        open.add(socket)
        socket.on("close", () => open.delete(socket))
        socket.on("error", () => undefined)
        socket.write(`INFO {"server_id":"fake","version":"2.10.0","proto":1,"headers":true,"max_payload":1048576}\r\n`)
        socket.on("data", (data: Buffer) => {
          for (const _ of data.toString("latin1").matchAll(/PING\r\n/g)) socket.write("PONG\r\n")
        })
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          port: (server.address() as AddressInfo).port,
          open,
          opened: () => opened,
          close: () => {
            for (const socket of open) socket.destroy()
            server.close()
          }
        })))
    }
  ),
  ({ close }) => Effect.sync(close)
)

describe("NatsPublisher connections", () => {
  it.scopedLive("one connection per server, at most MAX_NATS_CONNECTIONS, all closed on shutdown", () =>
    Effect.gen(function*() {
      const server = yield* fakeNats
      const url = (n: number) => `nats://127.0.0.1:${server.port}/?n=${n}`
      yield* Effect.gen(function*() {
        const publisher = yield* NatsPublisher
        for (let i = 0; i < 3; i++) expect((yield* publisher.publish(delivery({ url: url(0), subject: "a.b" })))._tag).toBe("Delivered")
        expect(server.opened()).toBe(1)
        // One URL more than the cache holds: the least recently used connection is closed.
        for (let n = 1; n <= MAX_NATS_CONNECTIONS; n++) {
          expect((yield* publisher.publish(delivery({ url: url(n), subject: "a.b" })))._tag).toBe("Delivered")
        }
        expect(server.opened()).toBe(MAX_NATS_CONNECTIONS + 1)
        yield* eventually(Effect.sync(() => server.open.size), (size) => size === MAX_NATS_CONNECTIONS, {
          what: "open connections"
        })
      }).pipe(Effect.provide(publisherWith("127.0.0.1")))
      // The publisher's scope has ended: every connection is closed.
      yield* eventually(Effect.sync(() => server.open.size), (size) => size === 0, { what: "open connections" })
    }))
})
