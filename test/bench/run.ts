/**
 * One run of a bench against Parley (test/bench/appends.ts, realtime.ts, delivery.ts): its random id,
 * its database `parley_bench_<id>` on DATABASE_URL's server (dropped at the end, or on Ctrl-C/SIGTERM),
 * its work dir for the logs, the start-up banner, Ctrl-C, the Parley nodes it starts and the tenant
 * it measures through. Child processes in general are processes.ts's.
 */
import { randomBytes } from "node:crypto"
import { mkdirSync } from "node:fs"
import os from "node:os"
import { join } from "node:path"
import {
  call,
  type Child,
  freePorts,
  killChildren,
  parleyNodeArgs,
  type Probe,
  startChild,
  waitUntilServing,
  withDatabase
} from "./processes.js"

export interface Run {
  /** Where the children's logs (and probe reports) go. */
  readonly workDir: string
  /** The run's database; it exists once `createDatabase` has run. */
  readonly db: { readonly name: string; readonly url: string }
  readonly adminToken: string
  readonly createDatabase: () => Promise<void>
  /** Drops the database if it was created; once. */
  readonly dropDatabase: () => Promise<void>
}

let interruptedBy: NodeJS.Signals | undefined

/** The signal (Ctrl-C or SIGTERM) that is ending the run, if one is. */
export const interrupted = () => interruptedBy

/**
 * Prints the banner (`Parley <title> benchmark: cores, CPU, node, load average`, then the database and
 * work dir) and takes over SIGINT/SIGTERM: every child killed at once, `onInterrupt` awaited (work the
 * bench started elsewhere), the database dropped, exit 130.
 */
export const startRun = (title: string, serverUrl: string, onInterrupt: () => Promise<void> = async () => {}): Run => {
  const cpus = os.cpus()
  const id = randomBytes(6).toString("hex")
  const name = `parley_bench_${id}`
  const workDir = join(os.tmpdir(), `parley-bench-${id}`)
  mkdirSync(workDir, { recursive: true })
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  console.log(`Parley ${title} benchmark: ${cpus.length} cores (${cpus[0]?.model ?? "unknown CPU"}), node ${process.version}, ` +
    `load average ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}`)
  console.log(`database ${name}, logs in ${workDir}`)

  let created = false
  let dropped = false
  const createDatabase = async () => {
    created = true
    await withDatabase(serverUrl, (client) => client.query(`CREATE DATABASE ${name}`))
  }
  const dropDatabase = async () => {
    if (!created || dropped) return
    dropped = true
    await withDatabase(serverUrl, (client) => client.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
  }
  const onSignal = (signal: NodeJS.Signals) => {
    if (interruptedBy !== undefined) return
    interruptedBy = signal
    console.error(`\n${signal}: stopping the servers${created && !dropped ? ` and dropping ${name}` : ""}`)
    killChildren()
    void onInterrupt().then(dropDatabase).catch((error: unknown) => console.error(error)).finally(() => process.exit(130))
  }
  process.on("SIGINT", onSignal)
  process.on("SIGTERM", onSignal)
  return { workDir, db: { name, url: url.toString() }, adminToken: randomBytes(24).toString("hex"), createDatabase, dropDatabase }
}

/** Runs a bench's `main`: a failure is printed and exits 1, unless an interruption is already ending the run. */
export const runBench = (main: () => Promise<void>) =>
  main().catch((error: unknown) => {
    if (interruptedBy !== undefined) return
    console.error(error instanceof Error ? error.stack ?? error.message : error)
    killChildren()
    process.exitCode = 1
  })

/** What the benches run as Parley (BENCH_SERVER_ENTRY replaces the built server). */
export const parleyEntry = () => process.env["BENCH_SERVER_ENTRY"] ?? "dist/src/main.js"

/** A Parley node on the run's database (`node <npm start's flags> <parleyEntry()>`), once ready. */
export const startParleyNode = async (run: Run, name: string, probe?: Probe) => {
  const [port, runnerPort] = await freePorts(2)
  const child = startChild(name, parleyNodeArgs(), parleyEntry(), port!, {
    PORT: String(port),
    HOST: "127.0.0.1",
    CLUSTER_RUNNER_PORT: String(runnerPort),
    DATABASE_URL: run.db.url,
    ADMIN_API_TOKEN: run.adminToken,
    LOG_LEVEL: "warning",
    DRAIN_REFUSE_MS: "0",
    DRAIN_MAX_MS: "10000",
    // Webhook receivers are on 127.0.0.1, which the address guard refuses unless allowed.
    WEBHOOK_ALLOWED_HOSTS: "127.0.0.1",
    DATA_DIR: join(run.workDir, "data")
  }, run.workDir, { probe })
  await waitUntilServing(child, "/health/ready")
  return child
}

/** The body of a setup call answered `status`, or an error naming `what`. */
export const expectStatus = (what: string, reply: { status: number; body: unknown }, status: number) => {
  if (reply.status !== status) throw new Error(`${what}: ${reply.status} ${JSON.stringify(reply.body)}`)
  return reply.body
}

/** A webhook channel to create, with the conversations to store for it. */
export interface ChannelSpec {
  readonly name: string
  readonly url: string
  readonly conversations: ReadonlyArray<string>
}

/**
 * One tenant (its activity_create limit raised out of the way of the load) and its webhook channels,
 * each the origin of its conversations. Those are stored directly: there is no public create route
 * for tenants' conversations, so rows as test/support/Fixtures.ts inserts them.
 */
export const setUpTenant = async <C extends ChannelSpec>(node: Child, run: Run, specs: ReadonlyArray<C>) => {
  const admin = { authorization: `Bearer ${run.adminToken}` }
  const tenant = expectStatus("tenant create", await call(node.port, "POST", "/api/v1/admin/tenants", admin, { tenant: { name: "bench" } }), 201)
  const { api_key: apiKey, id: tenantId } = (tenant as { data: { id: string; api_key: string } }).data
  expectStatus("tenant limits", await call(node.port, "PATCH", `/api/v1/admin/tenants/${tenantId}`, admin, {
    tenant: { limits: { activity_create: { limit: 1_000_000_000, scale_ms: 1000 } } }
  }), 200)
  const channels: Array<C & { readonly id: string; readonly secret: string; readonly rate_limit: unknown }> = []
  for (const spec of specs) {
    const body = expectStatus("channel create", await call(node.port, "POST", "/api/v1/manage/channels", { "x-api-key": apiKey }, {
      channel: { name: spec.name, type: "webhook", config: { url: spec.url } }
    }), 201)
    const { id, secret, rate_limit } = (body as { data: { id: string; secret: string; rate_limit: unknown } }).data
    channels.push({ ...spec, id, secret, rate_limit })
  }
  await withDatabase(run.db.url, async (client) => {
    for (const channel of channels) {
      await client.query(
        `INSERT INTO conversations (id, tenant_id, channel_id, origin_channel_id)
         SELECT id, $1, $2, $2 FROM UNNEST($3::uuid[]) AS id`,
        [tenantId, channel.id, channel.conversations]
      )
      await client.query(
        `INSERT INTO conversation_channels (conversation_id, channel_id, role)
         SELECT id, $1, 'origin' FROM UNNEST($2::uuid[]) AS id`,
        [channel.id, channel.conversations]
      )
    }
    await client.query("ANALYZE")
  })
  return { apiKey, channels }
}
