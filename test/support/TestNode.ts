import { ConfigProvider, Context, Effect, Layer } from "effect"
import { type AddressInfo, createServer } from "node:net"
import { AppConfig } from "../../src/config/AppConfig.js"
import { LeanAppendRoute } from "../../src/http/AppendRoute.js"
import { LoggingLive, NodeLive } from "../../src/NodeLive.js"
import type { TenantId } from "../../src/domain/Tenant.js"
import { TestDatabase, TestDatabaseLive } from "./TestDatabase.js"

/** A running node of the test: its base URL. */
export class TestNode extends Context.Tag("test/TestNode")<TestNode, { readonly baseUrl: string }>() {}

export const ADMIN_TOKEN = "test-admin-token-0123456789abcdef0123"

/** `count` distinct ports free now on 127.0.0.1; each is held until all are known. */
const pickPorts = (count: number) =>
  Effect.async<ReadonlyArray<number>>((resume) => {
    const servers = Array.from({ length: count }, () => createServer())
    let listening = 0
    for (const server of servers) {
      server.listen(0, "127.0.0.1", () => {
        if (++listening < count) return
        const ports = servers.map((s) => (s.address() as AddressInfo).port)
        let closed = 0
        for (const s of servers) s.close(() => ++closed === count && resume(Effect.succeed(ports)))
      })
    }
  })

/** Every port this test process has handed out: a port released by one pick can come back in the next. */
const handedOut = new Set<number>()

/**
 * `count` distinct free ports on 127.0.0.1, never handed out before in this process. Held together
 * while picked: ports taken one after the other could be the same one twice (a node's HTTP and
 * runner ports then collide), and so could ports of nodes started at the same time.
 */
export const freePorts = (count: number) =>
  pickPorts(count).pipe(
    Effect.filterOrFail((ports) => ports.every((port) => !handedOut.has(port)), () => "handed out already"),
    Effect.retry({ times: 50 }),
    Effect.tap((ports) => Effect.sync(() => ports.forEach((port) => handedOut.add(port)))),
    Effect.orDie
  )

export const freePort = Effect.map(freePorts(1), (ports) => ports[0]!)

/**
 * The layers of a whole node in this process on the test file's database, listening on `port` with its
 * runner on `runnerPort`; `env` adds to or overrides the test defaults.
 */
export const inProcessNode = (
  ports: { readonly port: number; readonly runnerPort: number },
  env: Record<string, string> = {},
  options: { readonly leanAppendRoute?: boolean } = {}
) =>
  Effect.map(TestDatabase, (db) => {
    const provider = ConfigProvider.fromMap(
      new Map(Object.entries({
        PORT: String(ports.port),
        CLUSTER_RUNNER_PORT: String(ports.runnerPort),
        HOST: "127.0.0.1",
        DATA_DIR: db.dataDir,
        ADMIN_API_TOKEN: ADMIN_TOKEN,
        DRAIN_REFUSE_MS: "0",
        LOG_LEVEL: "none",
        WEBHOOK_ALLOWED_HOSTS: "127.0.0.1",
        ...(db.url === undefined ? {} : { DATABASE_URL: db.url }),
        ...env
      }))
    )
    return NodeLive.pipe(
      // As in main.ts, so that LOG_LEVEL applies to the node under test.
      Layer.provide(LoggingLive),
      Layer.provide(AppConfig.Default),
      Layer.provide(Layer.succeed(LeanAppendRoute, options.leanAppendRoute ?? true)),
      Layer.provide(Layer.setConfigProvider(provider))
    )
  })

/**
 * A whole node in this process, on a free port and the test file's database. Without the lean
 * append route, appends take the router's way.
 */
export const TestNodeLive = (env: Record<string, string> = {}, options: { readonly leanAppendRoute?: boolean } = {}) =>
  Layer.unwrapScoped(
    Effect.gen(function*() {
      const [port, runnerPort] = yield* freePorts(2)
      const node = yield* inProcessNode({ port, runnerPort }, env, options)
      return Layer.merge(node, Layer.succeed(TestNode, { baseUrl: `http://127.0.0.1:${port}` }))
    })
  ).pipe(Layer.provideMerge(TestDatabaseLive))

/** A JSON HTTP exchange with a node; the body is parsed when there is one. */
export interface Reply {
  readonly status: number
  readonly headers: Headers
  readonly body: any
}

/** Sends a request to the test node and reads the whole answer. */
export const request = (
  method: string,
  path: string,
  options: { readonly body?: unknown; readonly headers?: Record<string, string>; readonly raw?: string } = {}
) =>
  Effect.flatMap(TestNode, ({ baseUrl }) =>
    Effect.promise(async (): Promise<Reply> => {
      const headers: Record<string, string> = { ...options.headers }
      let body: string | undefined = options.raw
      if (options.body !== undefined) {
        body = JSON.stringify(options.body)
        headers["content-type"] ??= "application/json"
      } else if (body !== undefined) headers["content-type"] ??= "application/json"
      const response = await fetch(`${baseUrl}${path}`, { method, headers, ...(body === undefined ? {} : { body }) })
      const text = await response.text()
      let parsed: unknown = text
      try {
        parsed = text === "" ? null : JSON.parse(text)
      } catch {
        // not JSON: keep the text
      }
      return { status: response.status, headers: response.headers, body: parsed }
    }))

/** Admin API call with the test token. */
export const admin = (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  request(method, `/api/v1/admin${path}`, {
    ...(body === undefined ? {} : { body }),
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...headers }
  })

/** Creates a tenant through the admin API and returns it with its primary key. */
export const createTenant = (fields: Record<string, unknown> = {}) =>
  Effect.map(
    admin("POST", "/tenants", { tenant: { name: `tenant-${crypto.randomUUID().slice(0, 8)}`, ...fields } }),
    (reply) => {
      if (reply.status !== 201) throw new Error(`tenant create failed: ${reply.status} ${JSON.stringify(reply.body)}`)
      return reply.body.data as { id: TenantId; api_key: string; [key: string]: unknown }
    }
  )

/** Management API call with a tenant API key. */
export const manage = (key: string, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  request(method, `/api/v1/manage${path}`, { ...(body === undefined ? {} : { body }), headers: { "x-api-key": key, ...headers } })
