import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Fiber, FiberRef, HashMap, Option } from "effect"
import Pg from "pg"
import { admin, request, TestNodeLive } from "./support/TestNode.js"
import { serverUrl, TestDatabase } from "./support/TestDatabase.js"
import { Lifecycle } from "../src/ops/Lifecycle.js"
import { poolCheck } from "../src/ops/Readiness.js"
import { DatabasePool } from "../src/db/Database.js"
import { eventually } from "./support/Eventually.js"

const METRICS_TOKEN = "metrics-token-for-tests"

/** The sample lines of a metric family in Prometheus text format. */
const samples = (text: string, name: string) => text.split("\n").filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))

layer(TestNodeLive(), { excludeTestServices: true })("health probes and metrics", (it) => {
  it.effect("/health/live is 200 {status: ok}", () =>
    Effect.gen(function*() {
      const reply = yield* request("GET", "/health/live")
      expect(reply.status).toBe(200)
      expect(reply.body).toEqual({ status: "ok" })
    }))

  it.effect("/health/ready is 200 with every check ok", () =>
    Effect.gen(function*() {
      const reply = yield* request("GET", "/health/ready")
      expect(reply.status).toBe(200)
      expect(reply.body).toEqual({
        status: "ready",
        checks: { database: "ok", oban: "ok", draining: "ok", migrations: "ok", pool: "ok" }
      })
    }))

  it.effect("/metrics is open without METRICS_TOKEN and labels requests by route template and status", () =>
    Effect.gen(function*() {
      const id = crypto.randomUUID()
      expect((yield* admin("GET", `/tenants/${id}`)).status).toBe(404)
      expect((yield* admin("GET", `/tenants/${id}`)).status).toBe(404)
      expect((yield* request("GET", "/no/such/page")).status).toBe(404)

      const reply = yield* request("GET", "/metrics")
      expect(reply.status).toBe(200)
      expect(reply.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/)
      const text = reply.body as string

      const requests = samples(text, "parley_http_requests_total")
      expect(requests).toContain(
        "parley_http_requests_total{route=\"/api/v1/admin/tenants/:id\",method=\"GET\",status=\"404\"} 2"
      )
      expect(requests).toContain("parley_http_requests_total{route=\"unmatched\",method=\"GET\",status=\"404\"} 1")
      // Raw ids never become labels: one series per template, not per URL.
      expect(text).not.toContain(id)

      expect(text).toContain("# TYPE parley_http_request_duration_seconds histogram")
      expect(samples(text, "parley_http_request_duration_seconds_bucket")).toContainEqual(
        expect.stringMatching(/^parley_http_request_duration_seconds_bucket\{le="\+Inf",route="\/api\/v1\/admin\/tenants\/:id",method="GET",status="404"\} 2$/)
      )
      expect(samples(text, "parley_http_request_duration_seconds_count")).toContainEqual(
        expect.stringContaining("route=\"/api/v1/admin/tenants/:id\"")
      )

      for (
        const gauge of [
          "parley_db_pool_connections",
          "parley_db_pool_idle_connections",
          "parley_db_pool_waiting_requests",
          "parley_db_pool_wait_seconds_avg"
        ]
      ) {
        expect(text).toContain(`# TYPE ${gauge} gauge`)
        expect(samples(text, gauge)).toHaveLength(1)
      }
      expect(samples(text, "parley_db_pool_connections")[0]).toMatch(/^parley_db_pool_connections [1-9]\d*$/)
      // On PostgreSQL the activity writer has connections of its own (none on the embedded database).
      const writerGauges = ["parley_db_writer_connections", "parley_db_writer_waiting_requests"]
      for (const gauge of writerGauges) {
        expect(samples(text, gauge)).toHaveLength(serverUrl === undefined ? 0 : 1)
      }
      expect(samples(text, "parley_draining")).toEqual(["parley_draining 0"])
    }))
})

layer(TestNodeLive({ METRICS_TOKEN }), { excludeTestServices: true })("metrics behind METRICS_TOKEN", (it) => {
  it.effect("no or a wrong bearer token is 401, the right one 200; probes stay open", () =>
    Effect.gen(function*() {
      const none = yield* request("GET", "/metrics")
      expect(none.status).toBe(401)
      expect(none.headers.get("www-authenticate")).toBe("Bearer")
      expect(none.body).not.toContain("parley_")
      expect((yield* request("GET", "/metrics", { headers: { authorization: "Bearer wrong" } })).status).toBe(401)
      expect((yield* request("GET", "/metrics", { headers: { authorization: METRICS_TOKEN } })).status).toBe(401)
      expect(
        (yield* request("GET", "/metrics", { headers: { authorization: `Basic ${METRICS_TOKEN}` } })).status
      ).toBe(401)

      const right = yield* request("GET", "/metrics", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
      expect(right.status).toBe(200)
      expect(right.body).toContain("parley_http_requests_total")

      expect((yield* request("GET", "/health/live")).status).toBe(200)
      expect((yield* request("GET", "/health/ready")).status).toBe(200)
    }))
})

layer(TestNodeLive(), { excludeTestServices: true })("readiness under a burst of probes", (it) => {
  it.scoped("50 concurrent probes share one database check; a probe after its second checks again", () =>
    Effect.gen(function*() {
      const { pool } = yield* DatabasePool
      let checkouts = 0
      const counted = () => void checkouts++
      yield* Effect.acquireRelease(
        Effect.sync(() => pool.on("acquire", counted)),
        () => Effect.sync(() => pool.off("acquire", counted))
      )
      const probes = (count: number) =>
        Effect.all(Array.from({ length: count }, () => request("GET", "/health/ready")), { concurrency: "unbounded" })
      // Past the cache of any earlier probe.
      yield* Effect.sleep("1100 millis")
      const before = checkouts
      const burst = yield* probes(50)
      expect(burst.map((reply) => reply.status)).toEqual(burst.map(() => 200))
      const byBurst = checkouts - before
      // The node's other work shares the pool meanwhile (cluster polls, jobs): a margin for it, far
      // below the 50 checkouts of a check per probe.
      expect(byBurst).toBeGreaterThanOrEqual(1)
      expect(byBurst).toBeLessThan(10)
      yield* Effect.sleep("1100 millis")
      const beforeNext = checkouts
      expect((yield* request("GET", "/health/ready")).status).toBe(200)
      expect(checkouts).toBeGreaterThan(beforeNext)
    }))
})

describe("readiness pool check", () => {
  it("degrades at the configured average wait, and READINESS_POOL_WAIT_MS=0 turns it off", () => {
    expect(poolCheck(199, 200)).toBe("ok")
    expect(poolCheck(200, 200)).toBe("error")
    expect(poolCheck(50, 20)).toBe("error")
    expect(poolCheck(60_000, 0)).toBe("ok")
  })
})

layer(TestNodeLive(), { excludeTestServices: true })("probes and metrics while draining", (it) => {
  it.effect("readiness is 503 draining with its reasons and every check; liveness stays 200; parley_draining is 1", () =>
    Effect.gen(function*() {
      yield* Effect.flatMap(Lifecycle, (lifecycle) => lifecycle.startDrain)
      const ready = yield* request("GET", "/health/ready", { headers: { "x-request-id": "ready-1" } })
      expect(ready.status).toBe(503)
      expect(ready.body).toEqual({
        status: "draining",
        reasons: ["draining"],
        checks: { database: "ok", oban: "ok", draining: "error", migrations: "ok", pool: "ok" }
      })
      expect(ready.headers.get("x-request-id")).toBe("ready-1")
      expect(ready.headers.get("connection")).toBe("close")

      const live = yield* request("GET", "/health/live")
      expect(live.status).toBe(200)
      expect(live.body).toEqual({ status: "ok" })

      const metrics = yield* request("GET", "/metrics")
      expect(samples(metrics.body as string, "parley_draining")).toEqual(["parley_draining 1"])
    }))
})

/** The fibers of the job runner's loops in this process, by job name. */
const runningLoops = Effect.map(Fiber.roots, (fibers) =>
  fibers.flatMap((fiber) =>
    Option.match(HashMap.get(fiber.getFiberRef(FiberRef.currentLogAnnotations), "job"), {
      onNone: () => [],
      onSome: (job) => [[String(job), fiber] as const]
    })
  ))

layer(TestNodeLive(), { excludeTestServices: true })("readiness when a background loop stops", (it) => {
  it.effect("every periodic loop of the node (ADR 0020) runs in the job runner", () =>
    Effect.gen(function*() {
      const names = (loops: ReadonlyArray<readonly [string, unknown]>) => loops.map(([job]) => job).sort()
      // The expiry singleton starts once this node holds its shard.
      const loops = yield* eventually(runningLoops, (loops) => names(loops).includes("close_idle_conversations"))
      expect(names(loops)).toEqual([
        "check_hub_gaps",
        "close_idle_conversations",
        "count_stored_deliveries",
        "drop_idle_cores",
        "follow_routing_rules",
        "follow_token_revocations",
        "forget_expired_token_revocations",
        "forget_idle_tenant_limits",
        "prune_audit_log",
        "prune_expired_sessions",
        "prune_rate_limit_counters",
        "prune_token_revocations",
        "purge_deleted_conversations",
        "renew_presence_leases",
        "sweep_due_deliveries",
        "sweep_live_connections",
        "sync_rate_limit_counters"
      ])
    }))

  // Stopped from outside, as a bug would stop it.
  it.effect("a stopped loop fails the oban check: 503 unavailable", () =>
    Effect.gen(function*() {
      expect((yield* request("GET", "/health/ready")).status).toBe(200)
      const hubLoop = (yield* runningLoops).find(([job]) => job === "check_hub_gaps")
      yield* Fiber.interrupt(hubLoop![1])
      const ready = yield* request("GET", "/health/ready")
      expect(ready.status).toBe(503)
      expect(ready.body).toEqual({
        status: "unavailable",
        reasons: ["oban"],
        checks: { database: "ok", oban: "error", draining: "ok", migrations: "ok", pool: "ok" }
      })
    }))
})

// The pool's read timeout is the statement timeout plus a margin; past setTimeout's limit Node
// fires a timer after 1 ms, and every statement of the pool failed as unanswered.
describe.skipIf(serverUrl === undefined)("the largest DATABASE_STATEMENT_TIMEOUT_MS", () => {
  layer(TestNodeLive({ DATABASE_STATEMENT_TIMEOUT_MS: "2147483647" }), { excludeTestServices: true })("node", (it) => {
    it.effect("statements of the pool are answered", () =>
      Effect.gen(function*() {
        expect((yield* request("GET", "/health/ready")).body).toMatchObject({ status: "ready" })
        expect((yield* admin("POST", "/tenants", { tenant: { name: "Largest timeout" } })).status).toBe(201)
      }))
  })
})

// A node of a newer build migrates inside a transaction that holds the migrator's table locked
// (LOCK TABLE ... ACCESS EXCLUSIVE) for as long as its migrations run, minutes for an index build.
describe.skipIf(serverUrl === undefined)("readiness while another node migrates", () => {
  layer(TestNodeLive(), { excludeTestServices: true })("node", (it) => {
    it.effect("stays ready: every migration this node ships is applied", () =>
      Effect.gen(function*() {
        expect((yield* request("GET", "/health/ready")).status).toBe(200)
        const { url } = yield* TestDatabase
        yield* Effect.acquireRelease(
          Effect.promise(async () => {
            const migrator = new Pg.Client({ connectionString: url! })
            await migrator.connect()
            await migrator.query("BEGIN")
            await migrator.query("LOCK TABLE effect_sql_migrations IN ACCESS EXCLUSIVE MODE")
            return migrator
          }),
          (migrator) => Effect.promise(() => migrator.query("ROLLBACK").then(() => migrator.end()))
        )
        const ready = yield* request("GET", "/health/ready")
        expect(ready.body).toMatchObject({ status: "ready" })
        expect(ready.status).toBe(200)
      }).pipe(Effect.scoped))
  })
})
