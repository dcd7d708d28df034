import { describe, expect, it } from "@effect/vitest"
import { Effect, Schedule } from "effect"
import { spawnNode } from "./support/NodeProcess.js"
import { tcpProxy } from "./support/TcpProxy.js"
import { serverUrl, TestDatabase, TestDatabaseLive } from "./support/TestDatabase.js"
import { ADMIN_TOKEN } from "./support/TestNode.js"

const call = (baseUrl: string, method: string, path: string, headers: Record<string, string>, body?: unknown) =>
  Effect.promise(async () => {
    const started = Date.now()
    const response = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(30_000)
    })
    const json = (await response.json()) as { error?: { code: string } }
    return { status: response.status, code: json.error?.code, ms: Date.now() - started }
  })

describe.skipIf(serverUrl === undefined)("database outage", () => {
  // A database that accepts connections and never answers them (a dead host behind a load balancer,
  // a full firewall queue): every new connection the node needs would wait for ever without a timeout.
  it.live("requests needing a new connection get 503 within the connect timeout; the node recovers", () =>
    Effect.gen(function*() {
      const db = yield* TestDatabase
      const url = new URL(db.url!)
      const proxy = yield* tcpProxy({ host: url.hostname, port: Number(url.port || 5432) })
      url.host = `127.0.0.1:${proxy.port}`
      const node = yield* spawnNode("A", { DATABASE_URL: url.toString() })
      const admin = { authorization: `Bearer ${ADMIN_TOKEN}` }
      const created = yield* Effect.promise(() =>
        fetch(`${node.baseUrl}/api/v1/admin/tenants`, {
          method: "POST",
          headers: { ...admin, "content-type": "application/json" },
          body: JSON.stringify({ tenant: { name: "outage" } })
        }).then((r) => r.json() as Promise<{ data: { id: string } }>)
      )
      expect(created.data.id).toBeDefined()

      proxy.blackhole()
      // The pool drops the connections it had once it sees them closed: the next query needs a new one.
      yield* Effect.sleep("500 millis")
      const during = yield* call(node.baseUrl, "GET", `/api/v1/admin/tenants/${created.data.id}`, admin)
      expect(during.status).toBe(503)
      expect(during.code).toBe("unavailable")
      // Within the 5 s connect timeout and the answer's own margin, not the client's 30 s.
      expect(during.ms).toBeLessThan(15_000)

      proxy.restore()
      const after = yield* call(node.baseUrl, "GET", `/api/v1/admin/tenants/${created.data.id}`, admin).pipe(
        Effect.filterOrFail((reply) => reply.status === 200, () => "not yet"),
        Effect.retry(Schedule.spaced("500 millis").pipe(Schedule.upTo("30 seconds"))),
        Effect.orDie
      )
      expect(after.status).toBe(200)
    }).pipe(Effect.scoped, Effect.provide(TestDatabaseLive)), 120_000)
})
