import { RunnerAddress, SingleRunner } from "@effect/cluster"
import { NodeClusterSocket } from "@effect/platform-node"
import { ConfigError, Duration, Effect, Layer, Option } from "effect"
import { isIP } from "node:net"
import { AppConfig } from "../src/config/AppConfig.js"
import { DatabasePool } from "../src/db/Database.js"
import { HostResolver, LOOKUP_BOUND } from "../src/delivery/HostResolver.js"
import { SerialReservationsLive } from "../src/db/SerialReservations.js"
import { oneNodeAtATime } from "../src/db/SetupLock.js"

/**
 * Where the runner listens: only on the advertised address, since the port has no authentication; a
 * name on its first address, none when it has no address (ADR 0022).
 */
export const runnerListenHost = (host: string, addresses: ReadonlyArray<string>): Option.Option<string> =>
  isIP(host) !== 0 ? Option.some(host) : Option.fromNullable(addresses[0])

/**
 * The runner's listen address for `host`, a name looked up once with a time bound. A name without an
 * address stops the start, naming the variable: listening anywhere else would expose the port.
 */
const lookUpListenHost = Effect.fn("ClusterLive.lookUpListenHost")(function*(host: string) {
  const resolved = yield* (yield* HostResolver).resolve(host)
  const listenHost = yield* Option.match(runnerListenHost(host, resolved), {
    onNone: () =>
      Effect.fail(ConfigError.InvalidData(
        ["CLUSTER_RUNNER_HOST"],
        `${host} has no address (looked up for ${Duration.format(LOOKUP_BOUND)}); the runner listens on that address only`
      )),
    onSome: Effect.succeed
  })
  if (resolved.length > 1) {
    yield* Effect.logWarning("CLUSTER_RUNNER_HOST has several addresses; the cluster runner listens on the first only").pipe(
      Effect.annotateLogs({ host, listen_address: listenHost, addresses: resolved.join(", ") })
    )
  }
  return listenHost
})

/**
 * This node's cluster runner: with PostgreSQL, a socket runner whose locks and messages live in the
 * database; the embedded database serves one node, so there a single runner without sockets or locks.
 */
export const ClusterLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const { embedded } = yield* DatabasePool
    const host = config.clusterRunnerHost
    const address = RunnerAddress.make(host, config.clusterRunnerPort)
    // The embedded database's single runner opens no port: nothing to look up.
    const listenHost = embedded ? host : yield* lookUpListenHost(host)
    const shardingConfig = {
      // Explicit: left to the environment, the runner would read the generic HOST and PORT.
      runnerAddress: Option.some(address),
      runnerListenAddress: Option.some(RunnerAddress.make(listenHost, config.clusterRunnerPort)),
      shardLockExpiration: Duration.millis(config.clusterShardLockExpirationMs),
      // Calls to entities on this node skip a msgpack round trip; remote calls are encoded anyway.
      simulateRemoteSerialization: false,
      entityTerminationTimeout: Duration.millis(config.clusterEntityTerminationTimeoutMs)
    }
    return embedded
      ? SingleRunner.layer({ shardingConfig, runnerStorage: "memory" })
      : oneNodeAtATime(
        // Its shard-lock operations share one reserved connection from concurrent fibers (ADR 0013).
        NodeClusterSocket.layer({ storage: "sql", serialization: "msgpack", shardingConfig }).pipe(
          Layer.provide(SerialReservationsLive)
        )
      )
  })
).pipe(Layer.provide(HostResolver.Default))
