import { RunnerAddress, SingleRunner } from "@effect/cluster"
import { NodeClusterSocket } from "@effect/platform-node"
import { Duration, Effect, Layer, Option } from "effect"
import { AppConfig } from "../src/config/AppConfig.js"
import { DatabasePool } from "../src/db/Database.js"
import { SqlError } from "@effect/sql/SqlError"

const isLoopback = (host: string) => host === "localhost" || host.startsWith("127.") || host === "::1"

/** The advisory lock nodes take while they set up the cluster's storage (distinct from shard locks). */
const CLUSTER_SETUP_LOCK = 7_340_001

/**
 * Builds `layer` while holding a database-wide advisory lock. The cluster's SQL storage creates its
 * tables when it starts, outside any migration lock: nodes started together on a new database
 * raced there and one of them died on a duplicate type. The lock is held on one connection of the
 * pool, and only while the storage starts.
 */
const oneNodeAtATime = <ROut, E, RIn>(layer: Layer.Layer<ROut, E, RIn>) =>
  Layer.scopedContext(Effect.gen(function*() {
    const { pool } = yield* DatabasePool
    const connect = Effect.tryPromise({
      try: () => pool.connect(),
      catch: (cause) => new SqlError({ cause, message: "cannot open a connection for the cluster setup" })
    })
    // The connection goes back to the pool once the storage has started; the layer lives on.
    return yield* Effect.acquireUseRelease(connect, (session) => {
      const query = (text: string) =>
        Effect.tryPromise({
          try: () => session.query(text, [CLUSTER_SETUP_LOCK]),
          catch: (cause) => new SqlError({ cause, message: "the cluster setup lock failed" })
        })
      return query("SELECT pg_advisory_lock($1)").pipe(
        Effect.zipRight(Layer.build(layer).pipe(Effect.ensuring(Effect.ignore(query("SELECT pg_advisory_unlock($1)")))))
      )
    }, (session) => Effect.sync(() => session.release()))
  }))

/**
 * This node's cluster runner. With PostgreSQL: a socket runner on `CLUSTER_RUNNER_PORT` whose shard
 * locks and messages live in the same database. The embedded database serves one node only, so
 * there it is a single runner without sockets or advisory locks.
 */
export const ClusterLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const { embedded } = yield* DatabasePool
    const address = RunnerAddress.make(config.clusterRunnerHost, config.clusterRunnerPort)
    const shardingConfig = {
      // Explicit: left to the environment, the runner would read the generic HOST and PORT.
      runnerAddress: Option.some(address),
      runnerListenAddress: Option.some(
        isLoopback(config.clusterRunnerHost) ? address : RunnerAddress.make("0.0.0.0", config.clusterRunnerPort)
      ),
      shardLockExpiration: Duration.millis(config.clusterShardLockExpirationMs),
      // Calls to entities on this node skip a msgpack round trip; remote calls are encoded anyway.
      simulateRemoteSerialization: false,
      entityTerminationTimeout: Duration.millis(config.clusterEntityTerminationTimeoutMs)
    }
    return embedded
      ? SingleRunner.layer({ shardingConfig, runnerStorage: "memory" })
      : oneNodeAtATime(NodeClusterSocket.layer({ storage: "sql", serialization: "msgpack", shardingConfig }))
  })
)
